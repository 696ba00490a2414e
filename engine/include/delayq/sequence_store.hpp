// delayq/sequence_store.hpp - the sequence role a task_store may offer.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace delayq {

/// Named counters kept beside the tasks and shared by every engine on the
/// store: numbers handed out once for the life of the store, across
/// restarts. delayq-server's beanstalkd listener takes its job ids here (a
/// beanstalk job id is a positive integer, 1 for the first job on a fresh
/// store). Names are 1-256 bytes.
///
/// A store offers it by deriving from both task_store and sequence_store and
/// answering task_store::sequences() with `this`. A store that answers null
/// keeps no sequences: the engine never needs them (sequences_of() answers
/// errc::unsupported).
///
/// Example:
/// \code
///   boost::system::error_code ec;
///   if (delayq::sequence_store* seq = delayq::sequences_of(store, ec)) {
///     std::uint64_t first = seq->allocate("beanstalk.job", 100, ec);
///     // first .. first + 99 are this caller's, for good
///   }
/// \endcode
///
/// Errors: the backend's, translated (errc::store_unavailable,
/// errc::store_error); errc::invalid_options for a count of 0, an empty or
/// too long name, or a sequence that would pass 2^64 - 1.
///
/// Thread safety: every member is safe from any thread, and atomic against
/// every other caller on the same store (other threads, other processes).
class sequence_store {
 public:
  virtual ~sequence_store() = default;

  /// Atomically takes `count` (>= 1) numbers from the sequence `name` and
  /// returns the first: a fresh sequence starts at 1; numbers are never handed
  /// out twice, across restarts and across every engine on the store.
  ///
  /// The numbers taken are first .. first + count - 1; the next call gets
  /// first + count or later (never a number below it). Durable before it
  /// returns. On error returns 0, and may have used up the numbers (a lost
  /// answer): never that they are handed out twice.
  virtual std::uint64_t allocate(std::string_view name, std::uint64_t count,
                                 boost::system::error_code& ec) = 0;
  /// Makes sure the sequence's next number is at least `next` (for ids taken
  /// by other means). Never lowers it; a fresh sequence raised to `next`
  /// hands out `next` first. Durable before it returns.
  virtual void raise_to(std::string_view name, std::uint64_t next,
                        boost::system::error_code& ec) = 0;

  /// The longest sequence name, in bytes.
  static constexpr std::size_t max_name = 256;
};

/// Whether `name` and `count` are what allocate() accepts (a non-empty name
/// of at most sequence_store::max_name bytes, a count >= 1): for the stores'
/// own checks.
inline bool valid_sequence_call(std::string_view name, std::uint64_t count) noexcept {
  return !name.empty() && name.size() <= sequence_store::max_name && count >= 1;
}

}  // namespace delayq
