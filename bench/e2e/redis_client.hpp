// redis_client.hpp - a small synchronous hiredis connection for delayq-bench:
// the seeds' baseline queue talks to Redis through it, and the benchmark reads
// the server's counters (INFO) with it. Not part of delayq's API.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/redis_store.hpp"

namespace delayq::bench {

struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using redis_reply = std::unique_ptr<redisReply, reply_deleter>;

/// One connection. Every failure (I/O or an error reply) throws
/// std::runtime_error with the server's message: a benchmark has no way to
/// recover, and a clear message beats a wrong figure.
///
/// Thread safety: none; one connection per thread.
class redis_client {
 public:
  /// Connects to the server `o` names (host/port or Unix socket), sends AUTH
  /// and SELECT as needed.
  explicit redis_client(const redis_options& o);
  ~redis_client();
  redis_client(const redis_client&) = delete;
  redis_client& operator=(const redis_client&) = delete;

  /// Sends one command and waits for its reply.
  redis_reply command(const std::vector<std::string_view>& args);
  /// Queues one command in the output buffer (pipelining); read its reply
  /// later with get_reply(), in order.
  void append(const std::vector<std::string_view>& args);
  /// Writes what is queued (if anything) and reads the next reply.
  redis_reply get_reply();

  /// Commands sent on this connection so far: the benchmark subtracts its
  /// own INFO calls from the server's command count.
  std::uint64_t sent() const noexcept { return sent_; }

 private:
  redis_reply check(redisReply* r, std::string_view what);
  redisContext* ctx_ = nullptr;
  std::uint64_t sent_ = 0;
};

/// "key:value" lines of an INFO reply (one section or several).
std::map<std::string, std::string> parse_info(std::string_view text);

/// `INFO commandstats` as command name -> calls.
std::map<std::string, std::uint64_t> parse_commandstats(std::string_view text);

}  // namespace delayq::bench
