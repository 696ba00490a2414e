// What the engine accepts: task types, ids, options, due times; and the ids
// it makes up when the caller gives none.
#pragma once

#include <atomic>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "delayq/engine_options.hpp"

namespace delayq::detail {

inline constexpr std::size_t max_type_length = 128;
inline constexpr std::size_t max_id_length = 256;

/// 1-128 characters from [A-Za-z0-9._:-].
bool valid_type(std::string_view type) noexcept;
/// 1-256 bytes, none a space or a control character.
bool valid_id(std::string_view id) noexcept;
/// errc::invalid_options when `o` is inconsistent (see engine_options).
boost::system::error_code check_options(const engine_options& o);

/// Milliseconds since the epoch, now.
std::int64_t now_ms() noexcept;

/// The latest due time any task may have, in epoch milliseconds: the
/// furthest instant system_clock::time_point holds (about the year 2262 with
/// libstdc++'s nanoseconds), so that every stored due time converts back.
std::int64_t latest_due_ms() noexcept;

/// The due time of a task scheduled `delay` from `now`, or an error:
/// invalid_delay for a negative delay, due_too_far beyond `max_delay` or
/// beyond latest_due_ms() (checked without overflow, whatever max_delay is).
std::int64_t due_after(std::chrono::milliseconds delay, std::int64_t now,
                       std::chrono::milliseconds max_delay, boost::system::error_code& ec) noexcept;

/// The due time of a task scheduled at `due` (floored to the millisecond),
/// or an error: invalid_delay before the epoch, due_too_far more than
/// `max_delay` after `now`.
std::int64_t due_at(std::chrono::system_clock::time_point due, std::int64_t now,
                    std::chrono::milliseconds max_delay, boost::system::error_code& ec) noexcept;

/// A task's ttr (schedule_options::ttr) in the milliseconds the engine and
/// the record keep, or errc::invalid_ttr below 0 or past 2^32 - 1 ms.
std::uint32_t ttr_ms_of(std::chrono::milliseconds ttr, boost::system::error_code& ec) noexcept;

/// The milliseconds a stored task's ttr is kept in: a ttr out of range (a
/// task made by hand) is cut to 0 .. 2^32 - 1, as the record stores it.
std::uint32_t clamped_ttr_ms(std::chrono::milliseconds ttr) noexcept;

/// Makes task ids unique across processes and restarts, 15 characters (so a
/// generated id fits std::string's inline buffer and the wheel's record):
/// 9 base-62 digits of a 64-bit random nonce drawn when the generator is
/// made, then 6 base-62 digits of a counter. When the counter has used its
/// 62^6 (56.8 billion) values a new nonce is drawn. Two generators collide
/// only if they draw the same 53.6-bit nonce: among a million engine starts
/// over a deployment's life, the odds are about 4 in 100,000; a collision
/// with a task this engine holds is caught and the next id taken, but one
/// with another process's task or an old dead letter is not.
///
/// Thread safety: next() is safe from any thread.
class id_generator {
 public:
  id_generator();
  std::string next();

 private:
  static std::uint64_t draw() noexcept;
  const std::uint64_t nonce_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace delayq::detail
