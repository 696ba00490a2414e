// persistence/redis/redis_sequences.hpp - the sequences role of the Redis
// store. Internal.
#pragma once

#include "delayq/sequence_store.hpp"
#include "redis_backend.hpp"

namespace delayq::detail::redis {

/// Sequences live in the hash `{PREFIX}:sequences` (name -> the last number
/// handed out; in the sharded layout too, under `{PREFIX}`, one slot):
/// allocate() is one HINCRBY, raise_to() one small script, each atomic on
/// the server, durable as the server's AOF makes it. A call retried after a
/// lost answer may use up numbers twice (never hand one out twice). A
/// sequence ends at 2^63 - 1 (Redis integers): errc::invalid_options past
/// it.
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex.
class sequences_role final : public sequence_store {
 public:
  explicit sequences_role(backend& b) : b_(b) {}

  std::uint64_t allocate(std::string_view name, std::uint64_t count,
                         boost::system::error_code& ec) override;
  void raise_to(std::string_view name, std::uint64_t next, boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::redis
