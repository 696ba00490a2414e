// Helpers of the process tests that run several delayq-server instances as
// one cluster (--cluster) on one store: a fresh sharded store URI, an
// instance started on it, and its lease figures from GET /v1/stats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "delayq/shard_leases.hpp"
// Compiled into the test program itself (tests/server/CMakeLists.txt).
#include "security/hmac_sha256.hpp"
#include "server_test_support.hpp"

namespace delayq::server_test {

inline constexpr int shard_count = 16;
/// The --tick every instance start_instance() starts gets, in ms.
inline constexpr int cluster_tick_ms = 10;

/// `base` (redis://... or redis-cluster://...) with a fresh key prefix and
/// shard_count shards.
inline std::string cluster_store_uri(const std::string& base) {
  std::string prefix = unique_name("scale");
  if (prefix.size() > 64) prefix = prefix.substr(prefix.size() - 64);
  return base + (base.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix +
         "&shards=" + std::to_string(shard_count);
}

/// An instance named `name` on `uri`, listening; `extra` goes on its
/// command line.
inline std::unique_ptr<server_process> start_instance(const std::string& uri,
                                                      const std::string& name,
                                                      const std::string& lease = "1s",
                                                      const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"--listen",
                                "127.0.0.1:0",
                                "--store",
                                uri,
                                "--token",
                                test_token,
                                "--tick",
                                std::to_string(cluster_tick_ms),
                                "--cluster",
                                "--shards",
                                std::to_string(shard_count),
                                "--lease",
                                lease,
                                "--instance",
                                name};
  args.insert(args.end(), extra.begin(), extra.end());
  auto p = std::make_unique<server_process>(std::move(args));
  p->wait_listening();
  return p;
}

/// The X-Delayq-Forwarded-By value a member would send for `method target`
/// with `body` at `unix_ms`, under the cluster's `key` (--cluster-secret,
/// else --token). Made here from the format docs/scale-out.md gives, not by
/// the server's code, so a test also checks that the two agree.
inline std::string forwarding_marker(const std::string& key, const std::string& instance,
                                     std::int64_t unix_ms, const std::string& method,
                                     const std::string& target, const std::string& body = "") {
  using delayq::server::sha256;
  const std::string ms = std::to_string(unix_ms);
  const std::string text = "delayq-forward-v1\n" + instance + "\n" + ms + "\n" + method + "\n" +
                           target + "\n" + delayq::server::to_hex(sha256::of(body));
  return instance + " " + ms + " " + delayq::server::to_hex(delayq::server::hmac_sha256(key, text));
}

/// A number of GET /v1/stats; -1 when the call or the key fails.
inline double server_number(http_client& c, const std::string& key) {
  auto s = c.get("/v1/stats");
  if (s.status != 200) return -1;
  auto n = find_number(s.body_json, key);
  return n ? *n : -1;
}

inline int shards_held(http_client& c) { return static_cast<int>(server_number(c, "shards_held")); }

/// Whether each instance of `clients` (named `names`, in order) holds
/// exactly the shards rendezvous hashing gives it, and none is leaving: no
/// shard moves while a test counts.
inline bool settled(const std::vector<std::string>& names, std::vector<http_client*> clients) {
  std::vector<int> want(names.size(), 0);
  for (std::uint32_t s = 0; s < shard_count; ++s) ++want[delayq::rendezvous_owner(s, names)];
  for (std::size_t i = 0; i < names.size(); ++i)
    if (shards_held(*clients[i]) != want[i] || server_number(*clients[i], "shards_leaving") != 0)
      return false;
  return true;
}

/// The local Redis Cluster's URI; the test fails without one.
inline std::string redis_cluster_uri() {
  const char* base = std::getenv("DELAYQ_TEST_REDIS_CLUSTER");
  REQUIRE_MESSAGE(
      (base && *base),
      "DELAYQ_TEST_REDIS_CLUSTER is not set: run through scripts/with-redis-cluster.sh");
  return base;
}

}  // namespace delayq::server_test
