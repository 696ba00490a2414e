// The shard lease table against a real Redis: one instance takes every
// shard, two and three converge to a split by rendezvous hashing, a silent
// instance loses its shards once its lease lapses, tokens grow across
// owners, a stale owner is fenced, release_all() hands shards over at once.
//
// Instances are driven by hand, round by round, in one thread. Time passes
// only where a lease must lapse (300 ms leases, rounds paced by
// next_round_in); such loops run until the condition holds, with a generous
// deadline as the failure bound, never a timing threshold.
//
// With DELAYQ_LEASES_ON_CLUSTER=1 the same tests run on the Redis Cluster of
// scripts/with-redis-cluster.sh (ctest "cluster: shard leases on a Redis
// Cluster"), where each shard's lease key sits on the node of its own slot
// and a round is one pipeline per node. The failed-round test needs a proxy
// in front of one server and runs on a single Redis only.
//
// With DELAYQ_LEASES_ON_POSTGRES=1 they run on the PostgreSQL store's lease
// table instead (ctest "cluster: shard leases on PostgreSQL", through
// scripts/with-postgres.sh), every case but the two that only Redis has a
// reason for (its script cache, the proxy in front of it).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <thread>

#include "cluster_support.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "delayq/shard_store.hpp"
#include "freezing_proxy.hpp"
#include "pg_test_support.hpp"
#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

bool on_cluster() {
  const char* v = std::getenv("DELAYQ_LEASES_ON_CLUSTER");
  return v && std::string_view(v) == "1";
}

bool on_postgres() {
  const char* v = std::getenv("DELAYQ_LEASES_ON_POSTGRES");
  return v && std::string_view(v) == "1";
}

redis_options lease_options(const std::string& prefix) {
  return on_cluster() ? redis_cluster_test_options(prefix) : redis_test_options(prefix);
}

// Raw access to the lease keys: the one test server, or the cluster's nodes
// (each command on the master of its key's slot).
class raw_keys {
 public:
  raw_keys() {
    if (on_cluster())
      cluster_.emplace();
    else
      plain_.emplace();
  }
  std::optional<std::string> get(const std::vector<std::string>& args) {
    return cluster_ ? cluster_->get(args) : plain_->get(args);
  }
  long long integer(const std::vector<std::string>& args) {
    return cluster_ ? cluster_->integer(args) : plain_->integer(args);
  }
  void run(const std::vector<std::string>& args) {
    if (cluster_)
      cluster_->run(args);
    else
      plain_->run(args);
  }
  // EVAL of `script` with one key and one argument, on the key's node.
  long long eval_integer(const std::string& script, const std::string& key,
                         const std::string& arg) {
    const std::vector<std::string> args{"EVAL", script, "1", key, arg};
    if (!cluster_) return plain_->integer(args);
    auto r = cluster_->run_at(detail::redis::key_slot(key), args);
    REQUIRE_MESSAGE(r->type == REDIS_REPLY_INTEGER, detail::redis::reply_text(r.get()));
    return r->integer;
  }
  // One DEL per key: the keys of a cluster sit in different slots.
  void del(const std::vector<std::string>& keys) {
    for (const std::string& k : keys) run({"DEL", k});
  }
  // How many nodes serve these keys (1 without a cluster).
  std::size_t nodes_of(const std::vector<std::string>& keys) {
    if (!cluster_) return 1;
    std::set<std::string> nodes;
    for (const std::string& k : keys)
      nodes.insert(cluster_->router().owner_address(detail::redis::key_slot(k)));
    return nodes.size();
  }
  // SCRIPT FLUSH on every master (a three-master cluster splits the slots
  // in thirds).
  void flush_scripts() {
    if (!cluster_) return plain_->run({"SCRIPT", "FLUSH"}), void();
    for (const unsigned slot : {0u, 8000u, 16000u}) cluster_->run_at(slot, {"SCRIPT", "FLUSH"});
  }

 private:
  std::optional<raw_redis> plain_;
  std::optional<raw_cluster> cluster_;
};

// One instance under test and what its last round said.
struct member {
  std::unique_ptr<shard_leases> leases;
  lease_round last;

  lease_round round(std::span<const std::uint32_t> keep = {}) {
    boost::system::error_code ec;
    last = leases->renew(keep, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return last;
  }
  std::set<std::uint32_t> held() const {
    std::set<std::uint32_t> out;
    for (const shard_lease& l : last.held) out.insert(l.shard);
    return out;
  }
  std::uint64_t token(std::uint32_t shard) const {
    for (const shard_lease& l : last.held)
      if (l.shard == shard) return l.token;
    return 0;
  }
};

struct cluster {
  std::string prefix = on_postgres() ? unique_schema("lease") : unique_prefix("lease");
  std::uint32_t shards = 64;
  std::optional<raw_keys> raw_;
  std::optional<raw_postgres> pg_;
  // PostgreSQL: the store whose schema holds the lease table (opened with
  // the first instance, with `shards`).
  std::unique_ptr<task_store> pg_store_;
  std::map<std::string, member> members;

  cluster() {
    if (on_postgres())
      pg_.emplace();
    else
      raw_.emplace();
  }
  ~cluster() {
    members.clear();
    if (pg_) {
      pg_store_.reset();
      pg_->drop_schema(prefix);
      return;
    }
    std::vector<std::string> keys{redis_members_key(prefix), "{" + prefix + "}:meta"};
    for (std::uint32_t s = 0; s < shards; ++s) keys.push_back(redis_lease_key(prefix, s));
    raw_->del(keys);
  }
  raw_keys& raw() {
    REQUIRE_MESSAGE(raw_.has_value(), "a Redis-only step");
    return *raw_;
  }

  std::unique_ptr<shard_leases> make(const cluster_options& o) {
    if (!pg_) return make_redis_shard_leases(lease_options(prefix), o);
    if (!pg_store_) pg_store_ = open_postgres_store(postgres_test_options(prefix, shards));
    boost::system::error_code ec;
    auto leases = pg_store_->sharded()->make_shard_leases(o, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return leases;
  }

  // What the store says of a shard's lease.
  std::string lease_table() const { return "\"" + prefix + "\".leases"; }
  std::optional<std::string> pg_value(const char* column, std::uint32_t shard) {
    return pg_->text("SELECT " + std::string(column) + "::text FROM " + lease_table() +
                     " WHERE shard = " + std::to_string(shard));
  }
  std::optional<std::string> stored_owner(std::uint32_t shard) {
    if (pg_) return pg_value("owner", shard);
    return raw().get({"HGET", redis_lease_key(prefix, shard), "owner"});
  }
  std::optional<std::string> stored_token(std::uint32_t shard) {
    if (pg_) return pg_value("token", shard);
    return raw().get({"HGET", redis_lease_key(prefix, shard), "token"});
  }
  long long stored_expiry(std::uint32_t shard) {
    if (pg_) return std::stoll(pg_value("expires_ms", shard).value_or("0"));
    return std::stoll(*raw().get({"HGET", redis_lease_key(prefix, shard), "expires_ms"}));
  }
  // Lets a shard's lease expire behind its holder's back.
  void expire(std::uint32_t shard) {
    if (pg_)
      pg_->run("UPDATE " + lease_table() +
               " SET expires_ms = 1 WHERE shard = " + std::to_string(shard));
    else
      raw().run({"HSET", redis_lease_key(prefix, shard), "expires_ms", "1"});
  }
  long long member_entries() {
    if (pg_) return pg_->count("SELECT count(*) FROM \"" + prefix + "\".members");
    return raw().integer({"ZCARD", redis_members_key(prefix)});
  }

  member& add(const std::string& name, std::chrono::milliseconds lease = 5s) {
    cluster_options o;
    o.shards = shards;
    o.lease = lease;
    o.instance = name;
    member& m = members[name];
    m.leases = make(o);
    return m;
  }

  // Never two holders: the leases the instances believe valid are disjoint.
  void check_exclusive() {
    const auto now = steady::now();
    std::map<std::uint32_t, std::string> holder;
    for (const auto& [name, m] : members)
      for (const shard_lease& l : m.last.held) {
        if (l.valid_until <= now) continue;
        const auto [it, fresh] = holder.emplace(l.shard, name);
        CHECK_MESSAGE(fresh, "shard ", l.shard, " held by ", it->second, " and ", name);
      }
  }

  // What the store says: the owner of every shard with a lease.
  std::map<std::uint32_t, std::string> owners() {
    std::map<std::uint32_t, std::string> out;
    for (std::uint32_t s = 0; s < shards; ++s)
      if (auto o = stored_owner(s)) out[s] = *o;
    return out;
  }

  // Every shard held by exactly one of `names`, the one rendezvous hashing
  // picks among them, and Redis agrees.
  bool split_among(std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    std::map<std::uint32_t, std::string> seen;
    for (const std::string& n : names)
      for (const std::uint32_t s : members.at(n).held())
        if (names[rendezvous_owner(s, names)] != n || !seen.emplace(s, n).second) return false;
    return seen.size() == shards && seen == owners();
  }

  // Rounds of every instance in `names`, in turn, until `done` holds; at
  // most `max_rounds` each. Returns how many it took.
  template <class Pred>
  int rounds_until(const std::vector<std::string>& names, Pred done, int max_rounds = 10) {
    for (int r = 1; r <= max_rounds; ++r) {
      for (const std::string& n : names) {
        members.at(n).round();
        check_exclusive();
      }
      if (done()) return r;
    }
    FAIL("not converged after ", max_rounds, " rounds each");
    return max_rounds;
  }

  // Rounds of `names` paced by next_round_in until `done` holds or
  // `limit` passes (the failure bound, far above what is expected).
  template <class Pred>
  void paced_until(const std::vector<std::string>& names, Pred done,
                   std::chrono::seconds limit = 30s) {
    const auto give_up = steady::now() + limit;
    while (!done()) {
      REQUIRE_MESSAGE(steady::now() < give_up, "condition not reached within ", limit.count(),
                      " s");
      std::chrono::milliseconds wait = 1h;
      for (const std::string& n : names) {
        wait = std::min(wait, members.at(n).round().next_round_in);
        check_exclusive();
      }
      std::this_thread::sleep_for(wait);
    }
  }

  bool run_fence(std::uint32_t shard, std::uint64_t token) {
    // The check every fenced write statement makes (pg_schema.cpp).
    if (pg_)
      return pg_->count("SELECT count(*) FROM " + lease_table() + " WHERE shard = " +
                        std::to_string(shard) + " AND token = " + std::to_string(token)) == 1;
    const std::string script = std::string(redis_fence_lua) +
                               "if delayq_fence(KEYS[1], ARGV[1]) then return 1 end return 0";
    return raw().eval_integer(script, redis_lease_key(prefix, shard), std::to_string(token)) == 1;
  }
};

std::set<std::uint32_t> all_shards(std::uint32_t n) {
  std::set<std::uint32_t> out;
  for (std::uint32_t s = 0; s < n; ++s) out.insert(s);
  return out;
}

}  // namespace

TEST_CASE("shard leases: one instance takes every shard in one round") {
  cluster c;
  member& a = c.add("a");
  const lease_round r = a.round();
  CHECK(a.held() == all_shards(c.shards));
  CHECK(r.gained.size() == c.shards);
  CHECK(r.lost.empty());
  CHECK(r.members == std::vector<std::string>{"a"});
  CHECK(r.next_round_in <= 5000ms / 3);
  for (const shard_lease& l : r.held) {
    CHECK(l.token >= 1);
    CHECK(l.valid_until > steady::now());
  }
  for (const auto& [s, owner] : c.owners()) CHECK(owner == "a");
  CHECK(c.owners().size() == c.shards);
  if (on_cluster()) {
    // The leases spread over the nodes: the round really spoke to several.
    std::vector<std::string> keys;
    for (std::uint32_t s = 0; s < c.shards; ++s) keys.push_back(redis_lease_key(c.prefix, s));
    CHECK(c.raw().nodes_of(keys) == 3);
  }

  // The next round renews: same tokens, nothing gained or lost.
  const auto tokens = r.held;
  const lease_round again = a.round();
  CHECK(again.gained.empty());
  CHECK(again.lost.empty());
  for (std::size_t i = 0; i < tokens.size(); ++i) CHECK(again.held[i].token == tokens[i].token);
}

TEST_CASE("shard leases: two instances converge to a split, a third takes its share") {
  cluster c;
  c.add("a");
  c.add("b");
  c.members.at("a").round();
  const int rounds = c.rounds_until({"b", "a"}, [&] { return c.split_among({"a", "b"}); });
  CHECK(rounds <= 3);
  // Each holds about half, exactly the rendezvous split.
  const std::vector<std::string> ab{"a", "b"};
  for (const std::string& n : ab) {
    CAPTURE(n);
    CHECK(c.members.at(n).held().size() >= 20);
    for (const std::uint32_t s : c.members.at(n).held()) CHECK(ab[rendezvous_owner(s, ab)] == n);
  }
  // Stable: another round changes nothing.
  for (const std::string& n : ab) {
    const lease_round r = c.members.at(n).round();
    CHECK(r.gained.empty());
    CHECK(r.lost.empty());
    CHECK(r.members == ab);
  }

  const auto a_before = c.members.at("a").held();
  const auto b_before = c.members.at("b").held();
  c.add("c");
  const std::vector<std::string> abc{"a", "b", "c"};
  const int joined = c.rounds_until({"c", "a", "b"}, [&] { return c.split_among(abc); });
  CHECK(joined <= 3);
  CHECK(c.members.at("c").held().size() >= 12);
  for (const std::string& n : abc)
    for (const std::uint32_t s : c.members.at(n).held()) CHECK(abc[rendezvous_owner(s, abc)] == n);
  // Only the joiner's share moved: a and b lost shards to c, none to each other.
  for (const std::uint32_t s : c.members.at("a").held()) CHECK(a_before.contains(s));
  for (const std::uint32_t s : c.members.at("b").held()) CHECK(b_before.contains(s));
}

TEST_CASE("shard leases: a silent instance loses its shards once its lease lapses") {
  cluster c;
  c.add("a", 300ms);
  c.add("b", 300ms);
  c.add("c", 300ms);
  c.rounds_until({"a", "b", "c"}, [&] { return c.split_among({"a", "b", "c"}); });
  const lease_round a_last = c.members.at("a").last;
  REQUIRE_FALSE(a_last.held.empty());

  // a stops calling renew(); b and c go on at the protocol's pace.
  c.paced_until({"b", "c"}, [&] { return c.split_among({"b", "c"}); });
  const std::vector<std::string> bc{"b", "c"};
  for (const std::string& n : bc)
    for (const std::uint32_t s : c.members.at(n).held()) CHECK(bc[rendezvous_owner(s, bc)] == n);

  // Tokens grew across owners: each of a's shards has a larger token now.
  for (const shard_lease& old : a_last.held) {
    const std::uint64_t now_token =
        std::max(c.members.at("b").token(old.shard), c.members.at("c").token(old.shard));
    CHECK(now_token > old.token);
  }

  // a comes back: its renewals fail, it reports every shard lost and, being
  // live again, takes its share back in the following rounds.
  member& a = c.members.at("a");
  const lease_round back = a.round();
  std::vector<std::uint32_t> was;
  for (const shard_lease& l : a_last.held) was.push_back(l.shard);
  CHECK(back.lost == was);
  CHECK(back.held.empty());
  c.rounds_until({"b", "c", "a"}, [&] { return c.split_among({"a", "b", "c"}); });
}

TEST_CASE("shard leases: a member that stops heartbeating gets a round as it lapses") {
  // Not up to a round later: that round was a third of the takeover time
  // of a stalled or dead member's shards (docs/scale-out.md, "Failover
  // bound").
  cluster c;
  constexpr auto lease = 600ms;
  c.add("a", lease);
  c.add("b", lease);
  c.rounds_until({"a", "b"}, [&] { return c.split_among({"a", "b"}); });
  // b's last round: its entry (and its leases) lapse a lease after it ran,
  // so no later than `lapse` on this clock.
  c.members.at("b").round();
  const auto lapse = steady::now() + lease;
  // A round of a's shortly before that, well inside its cadence of lease/3,
  // asks for the next round at the lapse.
  std::this_thread::sleep_until(lapse - lease / 9);
  const lease_round r = c.members.at("a").round();
  if (r.members == std::vector<std::string>{"a", "b"}) {
    // (Otherwise this thread woke too late: b has lapsed already.)
    CHECK(r.next_round_in < lease / 3 - 50ms);
    CHECK(steady::now() + r.next_round_in <= lapse + 40ms);
    std::this_thread::sleep_for(r.next_round_in);
    // Never before the lapse: that round finds b gone and takes its shards.
    const lease_round taken = c.members.at("a").round();
    CHECK(taken.members == std::vector<std::string>{"a"});
  }
  CHECK(c.split_among({"a"}));
  // Alone, a keeps its cadence.
  CHECK(c.members.at("a").round().next_round_in > lease / 3 - 50ms);
}

TEST_CASE("shard leases: a stale owner is fenced out") {
  cluster c;
  c.shards = 8;
  member& a = c.add("a", 300ms);
  a.round();
  REQUIRE(a.held().size() == 8);
  const std::uint64_t old_token = a.token(0);
  CHECK(c.run_fence(0, old_token));

  // a stalls; b is started and takes over once a's lease and heartbeat lapse.
  c.add("b", 300ms);
  c.paced_until({"b"}, [&] { return c.members.at("b").held().size() == 8; });
  const std::uint64_t new_token = c.members.at("b").token(0);
  CHECK(new_token > old_token);

  // The fence refuses the stale token and accepts the new one.
  CHECK_FALSE(c.run_fence(0, old_token));
  CHECK(c.run_fence(0, new_token));
  CHECK_FALSE(c.run_fence(0, new_token + 1));

  // a wakes up: its renewals fail, it holds nothing, and b keeps every shard.
  const lease_round r = a.round();
  CHECK(r.held.empty());
  CHECK(r.lost.size() == 8);
  for (const auto& [s, owner] : c.owners()) CHECK(owner == "b");
  CHECK(c.run_fence(0, new_token));
}

TEST_CASE("shard leases: a new incarnation under the same name waits for the old leases") {
  cluster c;
  c.shards = 8;
  // Long enough that the first incarnation's leases are still live when the
  // second one's first round runs, however slow the machine (300 ms lapsed
  // in an ASan run on PostgreSQL here, and the second took them at once).
  cluster_options o{8, 3s, "a"};
  auto first = c.make(o);
  const lease_round r1 = first->renew();
  REQUIRE(r1.held.size() == 8);

  // A restart under the same name while the old process is only stalled:
  // the old one may still fire the shards' tasks, so their live leases are
  // not taken, and the old tokens still pass the fence.
  auto second = c.make(o);
  lease_round r2 = second->renew();
  CHECK(r2.held.empty());
  for (const shard_lease& l : r1.held) CHECK(c.run_fence(l.shard, l.token));

  // The old one stops renewing: once its leases lapsed the new one takes
  // them, with newer tokens, and never before the old one's valid_until.
  const auto give_up = steady::now() + 30s;
  while (r2.held.size() < 8) {
    REQUIRE_MESSAGE(steady::now() < give_up, "the new incarnation never took the shards");
    std::this_thread::sleep_for(r2.next_round_in);
    r2 = second->renew();
    if (!r2.held.empty()) {
      for (const shard_lease& l : r1.held) CHECK(l.valid_until <= steady::now());
    }
  }
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(r2.held[i].token > r1.held[i].token);
    CHECK_FALSE(c.run_fence(r1.held[i].shard, r1.held[i].token));
  }
  // The old one comes back: its renewals are refused and it cannot take the
  // live leases of the new one.
  const lease_round stale = first->renew();
  CHECK(stale.lost.size() == 8);
  CHECK(stale.held.empty());
  const lease_round again = second->renew();
  CHECK(again.lost.empty());
  REQUIRE(again.held.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(again.held[i].token == r2.held[i].token);
}

TEST_CASE("shard leases: an expired lease nobody took is renewed with its token") {
  cluster c;
  c.shards = 4;
  member& a = c.add("a");
  a.round();
  const std::uint64_t token = a.token(2);
  // Let shard 2's lease expire behind a's back (expires_ms in the past).
  c.expire(2);
  const lease_round r = a.round();
  CHECK(r.lost.empty());
  CHECK(a.token(2) == token);
  CHECK(c.run_fence(2, token));
  CHECK(c.stored_expiry(2) > 1);
}

TEST_CASE("shard leases: release_all hands every shard over at once") {
  cluster c;
  c.add("a");
  c.add("b");
  c.rounds_until({"a", "b"}, [&] { return c.split_among({"a", "b"}); });
  const lease_round a_last = c.members.at("a").last;

  c.members.at("a").leases->release_all();
  c.members.at("a").last = {};
  for (const shard_lease& l : a_last.held) {
    CHECK_FALSE(c.stored_owner(l.shard));
    CHECK(c.stored_token(l.shard) == std::to_string(l.token));
  }
  CHECK(c.member_entries() == 1);

  // b takes them in its very next round (5 s leases: nothing lapsed), each
  // with a larger token than a had.
  const lease_round r = c.members.at("b").round();
  CHECK(c.members.at("b").held() == all_shards(c.shards));
  CHECK(r.gained.size() == a_last.held.size());
  CHECK(r.members == std::vector<std::string>{"b"});
  for (const shard_lease& l : a_last.held) CHECK(c.members.at("b").token(l.shard) > l.token);
}

TEST_CASE("shard leases: a kept shard stays, reported leaving, until it is let go") {
  cluster c;
  member& a = c.add("a");
  a.round();
  REQUIRE(a.held() == all_shards(c.shards));
  member& b = c.add("b");
  b.round();  // joins; every lease is held, so it takes nothing yet
  const std::vector<std::string> ab{"a", "b"};
  std::vector<std::uint32_t> to_b;
  for (std::uint32_t s = 0; s < c.shards; ++s)
    if (ab[rendezvous_owner(s, ab)] == "b") to_b.push_back(s);
  REQUIRE(to_b.size() >= 2);
  const std::uint64_t kept_token = a.token(to_b[0]);

  // a keeps every shard b should own: renewed with their tokens, reported
  // leaving; b gets none of them.
  lease_round r = a.round(to_b);
  CHECK(r.leaving == to_b);
  CHECK(r.lost.empty());
  CHECK(a.held() == all_shards(c.shards));
  CHECK(b.round().held.empty());

  // a keeps one and lets the rest go: b takes those at its next round.
  r = a.round(std::span(to_b).first(1));
  CHECK(r.leaving == std::vector<std::uint32_t>{to_b[0]});
  CHECK(r.lost == std::vector<std::uint32_t>(to_b.begin() + 1, to_b.end()));
  CHECK(a.token(to_b[0]) == kept_token);
  b.round();
  CHECK(b.held() == std::set<std::uint32_t>(to_b.begin() + 1, to_b.end()));

  // Leaving, a keeps it still: release_all(keep) leaves that lease to expire
  // (its owner stays a) and releases the others.
  std::uint32_t own = 0;
  while (ab[rendezvous_owner(own, ab)] != "a") ++own;
  boost::system::error_code ec;
  a.leases->release_all(std::span(to_b).first(1), ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(c.stored_owner(to_b[0]) == "a");
  CHECK_FALSE(c.stored_owner(own));
}

// Redis only (its script cache): named apart, so that the runs on PostgreSQL
// ("postgres: shard leases: *") leave it out.
TEST_CASE("shard leases (redis): a server that lost the scripts gets them again (NOSCRIPT)") {
  cluster c;
  member& a = c.add("a");
  a.round();
  c.raw().flush_scripts();
  const auto before = a.last.held;
  const lease_round r = a.round();
  CHECK(r.lost.empty());
  REQUIRE(r.held.size() == before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(r.held[i].shard == before[i].shard);
    CHECK(r.held[i].token == before[i].token);
  }
  // And a fresh instance on the flushed server works too.
  c.raw().flush_scripts();
  c.add("b");
  c.rounds_until({"b", "a"}, [&] { return c.split_among({"a", "b"}); });
}

TEST_CASE("shard leases: a failed round keeps only the leases that surely last") {
  cluster c;
  c.shards = 4;
  // A proxy in front of the store's server, which the lease table dials.
  freezing_proxy proxy(on_postgres() ? postgres_options::parse(postgres_test_uri()).connection.port
                                     : redis_options::parse(redis_test_uri()).port);
  std::unique_ptr<task_store> through_proxy;
  const auto make = [&](cluster_options o) -> std::unique_ptr<shard_leases> {
    if (on_postgres()) {
      postgres_options po = postgres_test_options(c.prefix, 4);
      po.connection.port = proxy.port();
      through_proxy = open_postgres_store(po);
      boost::system::error_code ec;
      auto leases = through_proxy->sharded()->make_shard_leases(o, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      return leases;
    }
    redis_options ro = redis_test_options(c.prefix);
    ro.port = proxy.port();
    return make_redis_shard_leases(ro, o);
  };

  SUBCASE("within valid_until the leases stay held") {
    auto a = make(cluster_options{4, 10s, "a"});
    const lease_round first = a->renew();
    REQUIRE(first.held.size() == 4);
    proxy.sever();
    boost::system::error_code ec;
    const lease_round r = a->renew(ec);
    CHECK(ec == errc::store_unavailable);
    CHECK(r.held == first.held);
    CHECK(r.lost.empty());
    CHECK(r.members.empty());
  }
  SUBCASE("past valid_until they are lost") {
    auto a = make(cluster_options{4, 200ms, "a"});
    const lease_round first = a->renew();
    REQUIRE(first.held.size() == 4);
    proxy.sever();
    std::this_thread::sleep_until(first.held.back().valid_until + 1ms);
    boost::system::error_code ec;
    const lease_round r = a->renew(ec);
    CHECK(ec == errc::store_unavailable);
    CHECK(r.held.empty());
    CHECK(r.lost == std::vector<std::uint32_t>{0, 1, 2, 3});
    CHECK_THROWS_AS(a->renew(), boost::system::system_error);
  }
}
