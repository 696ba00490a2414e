// The sequences role of the Redis store (redis_sequences.hpp).
#include "redis_sequences.hpp"

#include <limits>

#include "connection.hpp"
#include "scripts.hpp"

namespace delayq::detail::redis {

// A sequence is a field of the hash `{PREFIX}:sequences` holding the last
// number handed out (absent: none yet). HINCRBY is atomic on the server;
// numbers are Redis integers, so a sequence ends at 2^63 - 1.

std::uint64_t sequences_role::allocate(std::string_view name, std::uint64_t count,
                                       boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, count) || count > most) {
    ec = errc::invalid_options;
    return 0;
  }
  backend& m = b_;
  const std::string by = std::to_string(count);
  std::uint64_t first = 0;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "allocate", ec, [&](connection& c) {
    auto replies =
        c.exchange({command().arg("HINCRBY").arg(m.keys.sequences).arg(name).arg(by)}, true);
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) {
      // "increment or decrement would overflow": the sequence is used up.
      if (reply_text(r).find("overflow") != std::string::npos)
        throw redis_failure{errc::invalid_options,
                            "sequence '" + std::string(name) + "' would pass 2^63 - 1"};
      throw_server_error("HINCRBY", r);
    }
    if (r->type != REDIS_REPLY_INTEGER || r->integer < static_cast<long long>(count))
      throw redis_failure{errc::store_error, "unexpected HINCRBY reply"};
    first = static_cast<std::uint64_t>(r->integer) - count + 1;
  });
  return ec ? 0 : first;
}

void sequences_role::raise_to(std::string_view name, std::uint64_t next,
                              boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, 1) || next > most) {
    ec = errc::invalid_options;
    return;
  }
  if (next <= 1) return;  // every sequence hands out 1 or more next
  backend& m = b_;
  const std::string last = std::to_string(next - 1);  // the field holds the last one handed out
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "raise_to", ec, [&](connection& c) {
    auto replies = c.exchange({command()
                                   .arg("EVAL")
                                   .arg(sequence_raise_script)
                                   .arg("1")
                                   .arg(m.keys.sequences)
                                   .arg(name)
                                   .arg(last)},
                              true);
    if (replies[0]->type == REDIS_REPLY_ERROR) throw_server_error("raise_to", replies[0].get());
  });
}

}  // namespace delayq::detail::redis
