// Helpers of the tests that run on a Redis Cluster (scripts/with-redis-cluster.sh):
// the cluster's URI and raw access to its keys through the store's own
// slot router (persistence/redis/cluster_router.hpp).
#pragma once

#include <utility>

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cluster_router.hpp"
#include "delayq/redis_store.hpp"
#include "store_handshake.hpp"

namespace delayq::test {

/// The test cluster's URI from DELAYQ_TEST_REDIS_CLUSTER; fails the test
/// when unset.
inline std::string redis_cluster_test_uri() {
  const char* uri = std::getenv("DELAYQ_TEST_REDIS_CLUSTER");
  if (!uri || !*uri)
    FAIL(
        "DELAYQ_TEST_REDIS_CLUSTER is not set: run these tests through "
        "scripts/with-redis-cluster.sh, which starts a private three-node Redis Cluster and "
        "sets it (ctest -L cluster does)");
  return uri;
}

/// The test cluster's options with a given prefix.
inline redis_options redis_cluster_test_options(const std::string& prefix) {
  return redis_options::parse(redis_cluster_test_uri() + "?prefix=" + prefix);
}

/// Commands on the test cluster, each sent to the master of the slot of its
/// first key (args[1]), following redirects like the store does.
class raw_cluster {
 public:
  raw_cluster() : opts_(redis_options::parse(redis_cluster_test_uri())) {}

  detail::redis::reply_ptr run(const std::vector<std::string>& args) {
    return run_at(detail::redis::key_slot(args.size() > 1 ? args[1] : args[0]), args);
  }
  /// The same on the master of `slot`.
  detail::redis::reply_ptr run_at(unsigned slot, const std::vector<std::string>& args) {
    detail::redis::command cmd;
    for (const std::string& a : args) cmd.arg(a);
    detail::redis::reply_ptr out;
    detail::redis::sigpipe_guard guard;
    auto failure = router_.try_run(
        slot, [&](detail::redis::connection& c) { out = std::move(c.exchange({cmd})[0]); });
    REQUIRE_MESSAGE(!failure, (failure ? failure->message : std::string()));
    return out;
  }

  std::optional<std::string> get(const std::vector<std::string>& args) {
    auto r = run(args);
    if (r->type == REDIS_REPLY_NIL) return std::nullopt;
    REQUIRE_MESSAGE(r->type == REDIS_REPLY_STRING, detail::redis::reply_text(r.get()));
    return std::string(r->str, r->len);
  }

  long long integer(const std::vector<std::string>& args) {
    auto r = run(args);
    REQUIRE_MESSAGE(r->type == REDIS_REPLY_INTEGER, detail::redis::reply_text(r.get()));
    return r->integer;
  }

  void drop_prefix(const std::string& prefix) {
    const std::string tag = "{" + prefix + "}:";
    run({"DEL", tag + "tasks", tag + "due", tag + "quarantine", tag + "quarantine:reason",
         tag + "meta", tag + "dead", tag + "dead:by_time", tag + "dead:quarantine",
         tag + "dead:quarantine:reason", tag + "settings"});
  }

  detail::redis::cluster_router& router() { return router_; }

 private:
  redis_options opts_;
  detail::redis::cluster_router router_{opts_, "test",
                                        detail::redis::client_name_for(opts_, ":raw"),
                                        detail::redis::store_handshake::reader(opts_)};
};

}  // namespace delayq::test
