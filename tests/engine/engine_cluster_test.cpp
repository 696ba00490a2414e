// Clusters (engine_options::cluster): several engines on one sharded Redis
// store hold every shard once between them, run each task once, on its
// shard's owner, and answer calls on an id only where its shard is held.
// Real Redis: the sharded redis_store (URI shards=N), its lease table and
// its notices. With DELAYQ_CLUSTER_ON_POSTGRES=1 the same cases run on the
// PostgreSQL store (its lease table and LISTEN/NOTIFY; ctest "cluster:
// engines in a cluster on PostgreSQL", under scripts/with-postgres.sh). The fence test wraps the
// store in `sharded_view`, which can refuse fenced writes (lease_lost) on demand.

#include <doctest/doctest.h>

#include <hiredis/hiredis.h>
#include <algorithm>
#include <delayq/delayq.hpp>
#include <delayq/redis_shard_leases.hpp>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine_test_support.hpp"
#include "pg_test_support.hpp"

using namespace delayq_test;

namespace {

constexpr std::uint32_t test_shards = 16;

// The sharded store, which can be told to refuse every fenced change, as
// the store does once the shard's lease moved on: a shard's part holding a
// fenced change is refused whole, the other shards' parts land, and the
// write reports lease_lost.
class sharded_view final : public delayq::task_store,
                           public delayq::dead_letter_store,
                           public delayq::shard_store {
 public:
  explicit sharded_view(const std::string& uri) : inner_(delayq::open_store(uri)) {}

  std::atomic<bool> refuse_fenced{false};
  std::atomic<int> refused{0};  // changes refused so far

  // While gated, list_due_shard() (a shard read) and find() (a call's
  // lookup of ids) wait at their latch until it is released.
  std::atomic<bool> gate_reads{false}, gate_finds{false};
  latch reads, finds;

  // A shard whose reads fail (a key of the wrong type in it): -1 for none.
  std::atomic<int> broken_shard{-1};

  // While set, a write holding a fenced change (an attempt's outcome) fails
  // whole as an unreachable store's would: nothing lands, the writer keeps it.
  std::atomic<bool> unreachable_fenced{false};

  void write(std::span<const delayq::store_change> changes,
             boost::system::error_code& ec) override {
    if (unreachable_fenced &&
        std::any_of(changes.begin(), changes.end(), [](const auto& c) { return c.fence != 0; })) {
      ec = delayq::errc::store_unavailable;
      return;
    }
    if (refuse_fenced) {
      std::set<std::uint32_t> refused_shards;
      for (const auto& c : changes)
        if (c.fence != 0) refused_shards.insert(delayq::shard_of(c.task->id, test_shards));
      if (!refused_shards.empty()) {
        std::vector<delayq::store_change> rest;
        for (const auto& c : changes)
          if (!refused_shards.count(delayq::shard_of(c.task->id, test_shards))) rest.push_back(c);
        refused += static_cast<int>(changes.size() - rest.size());
        if (!rest.empty()) inner_->write(rest, ec);
        if (!ec) ec = delayq::errc::lease_lost;
        return;
      }
    }
    inner_->write(changes, ec);
  }
  void async_write(std::span<const delayq::store_change> changes,
                   std::function<void(boost::system::error_code)> done) override {
    boost::system::error_code ec;
    write(changes, ec);
    done(ec);
  }
  delayq::shard_store* sharded() noexcept override { return this; }
  std::uint32_t shards() const noexcept override { return inner_->sharded()->shards(); }
  std::unique_ptr<delayq::shard_leases> make_shard_leases(const delayq::cluster_options& c,
                                                          boost::system::error_code& ec) override {
    return inner_->sharded()->make_shard_leases(c, ec);
  }
  std::unique_ptr<delayq::task_listener> listen(boost::system::error_code& ec) override {
    return inner_->sharded()->listen(ec);
  }
  delayq::list_summary list_due_shard(std::uint32_t shard, delayq::due_cursor& after,
                                      std::int64_t until_ms, std::size_t limit,
                                      const std::function<void(delayq::task&&)>& sink,
                                      boost::system::error_code& ec) override {
    if (gate_reads) reads.enter_and_wait();
    if (static_cast<int>(shard) == broken_shard) {
      ec = delayq::errc::store_error;
      return {};
    }
    return inner_->sharded()->list_due_shard(shard, after, until_ms, limit, sink, ec);
  }
  void save(std::span<const delayq::task> tasks, boost::system::error_code& ec) override {
    inner_->save(tasks, ec);
  }
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    inner_->remove(ids, ec);
  }
  delayq::list_summary list(const std::function<void(delayq::task&&)>& sink,
                            boost::system::error_code& ec) override {
    return inner_->list(sink, ec);
  }
  delayq::list_summary list_due(delayq::due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                const std::function<void(delayq::task&&)>& sink,
                                boost::system::error_code& ec) override {
    return inner_->list_due(after, until_ms, limit, sink, ec);
  }
  std::vector<std::optional<delayq::task>> find(std::span<const std::string> ids,
                                                boost::system::error_code& ec) override {
    if (gate_finds) finds.enter_and_wait();
    return inner_->find(ids, ec);
  }
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override {
    inner_->quarantine(id, reason, ec);
  }
  delayq::dead_letter_store* dead_letters() noexcept override { return this; }
  void bury(std::span<const delayq::dead_letter> d, boost::system::error_code& ec) override {
    inner_->dead_letters()->bury(d, ec);
  }
  std::vector<delayq::dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                             boost::system::error_code& ec) override {
    return inner_->dead_letters()->list_dead(offset, limit, ec);
  }
  std::optional<delayq::dead_letter> find_dead(std::string_view id,
                                               boost::system::error_code& ec) override {
    return inner_->dead_letters()->find_dead(id, ec);
  }
  void revive(std::span<const delayq::task> t, boost::system::error_code& ec) override {
    inner_->dead_letters()->revive(t, ec);
  }
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override {
    inner_->dead_letters()->purge(ids, ec);
  }
  std::size_t count_dead(boost::system::error_code& ec) override {
    return inner_->dead_letters()->count_dead(ec);
  }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::unique_ptr<delayq::task_store> inner_;
};

// One instance: an engine whose executor of type "t" records its runs.
struct member {
  std::string name;
  recorder ran;
  std::unique_ptr<delayq::engine> eng;
};

delayq::engine_options member_options(const std::string& name, std::size_t workers = 2,
                                      std::chrono::milliseconds lease = std::chrono::milliseconds{
                                          600}) {
  auto o = fast_options();
  o.workers = workers;
  o.cluster = delayq::cluster_options{test_shards, lease, name};
  return o;
}

bool cluster_on_postgres() {
  const char* v = std::getenv("DELAYQ_CLUSTER_ON_POSTGRES");
  return v && std::string_view(v) == "1";
}

// A fresh sharded store URI.
std::string sharded_uri(const std::string& name) {
  if (cluster_on_postgres()) {
    std::string schema = name;
    std::replace(schema.begin(), schema.end(), '-', '_');
    return delayq::test::postgres_uri_for(delayq::test::unique_schema(schema),
                                          "shards=" + std::to_string(test_shards));
  }
  return fresh_redis_uri(name) + "&shards=" + std::to_string(test_shards);
}

// A lease table of the store at `uri` for another instance.
std::unique_ptr<delayq::shard_leases> other_leases(const std::string& uri,
                                                   delayq::cluster_options o) {
  if (!cluster_on_postgres())
    return delayq::make_redis_shard_leases(delayq::redis_options::parse(uri), std::move(o));
  // The lease table keeps nothing of the store it came from.
  auto store = delayq::open_store(uri);
  boost::system::error_code ec;
  auto leases = store->sharded()->make_shard_leases(o, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  return leases;
}

void start_member(member& m, io_thread& io, std::unique_ptr<delayq::task_store> store,
                  delayq::executor_factory f = {}, std::size_t workers = 2,
                  std::chrono::milliseconds lease = std::chrono::milliseconds{600}) {
  f.add("t", std::ref(m.ran));
  m.eng = std::make_unique<delayq::engine>(io.io, f, std::move(store),
                                           member_options(m.name, workers, lease));
  m.eng->start();
}
void start_member(member& m, io_thread& io, const std::string& uri) {
  start_member(m, io, delayq::open_store(uri));
}

// The instance that should own `shard` among the running `members`.
std::string desired_owner(std::uint32_t shard, std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names[delayq::rendezvous_owner(shard, names)];
}

// Waits until every member holds exactly the shards rendezvous hashing gives
// it: from then on nothing moves while the members stay.
bool wait_balanced(std::vector<member*> ms) {
  std::vector<std::string> names;
  for (member* m : ms) names.push_back(m->name);
  std::map<std::string, std::size_t> want;
  for (std::uint32_t s = 0; s < test_shards; ++s) ++want[desired_owner(s, names)];
  return eventually([&] {
    for (member* m : ms)
      if (m->eng->stats().shards_held != want[m->name]) return false;
    return true;
  });
}

// An id of the shard that `owner` should own among `names`, not in `taken`.
std::string id_owned_by(const std::string& owner, const std::vector<std::string>& names,
                        const std::string& stem, std::uint32_t* shard = nullptr,
                        const std::string& beside = {}) {
  for (int k = 0;; ++k) {
    std::string id = stem + "-" + std::to_string(k);
    const std::uint32_t s = delayq::shard_of(id, test_shards);
    if (desired_owner(s, names) != owner) continue;
    if (!beside.empty() && s != delayq::shard_of(beside, test_shards)) continue;
    if (shard) *shard = s;
    return id;
  }
}

// Makes the lease of `shard` look expired in the store, as it is once its
// holder stalled past it: the next instance that should own the shard takes
// it with a new token. (The holder's next round renews it unless that
// instance took it first: callers retry until it did.)
// A plain hiredis connection to the Redis of `uri`, for what the store does
// not do: play a stalled instance, or a broken connection.
struct raw_connection {
  explicit raw_connection(const std::string& uri) : opts(delayq::redis_options::parse(uri)) {
    c = opts.unix_socket.empty() ? redisConnect(opts.host.c_str(), static_cast<int>(opts.port))
                                 : redisConnectUnix(opts.unix_socket.c_str());
    REQUIRE(c != nullptr);
    REQUIRE_MESSAGE(c->err == 0, c->errstr);
  }
  ~raw_connection() { redisFree(c); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;
  // The reply of one command, as text ("" for a non-string reply).
  std::string run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()));
    REQUIRE(r != nullptr);
    std::string text = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS
                           ? std::string(r->str, r->len)
                           : std::string();
    freeReplyObject(r);
    return text;
  }
  delayq::redis_options opts;
  redisContext* c = nullptr;
};

void expire_lease(const std::string& uri, std::uint32_t shard) {
  if (cluster_on_postgres()) {
    const auto o = delayq::postgres_options::parse(uri);
    delayq::test::raw_postgres pg;
    pg.run("UPDATE \"" + o.layout.schema +
           "\".leases SET expires_ms = 0 WHERE shard = " + std::to_string(shard));
    return;
  }
  raw_connection raw(uri);
  raw.run({"HSET", delayq::redis_lease_key(raw.opts.prefix, shard), "expires_ms", "0"});
}

// Closes the notice connections of the stores on `uri`'s prefix (named
// "delayq:PREFIX:listen"), as a network fault would; returns how many.
int kill_listeners(const std::string& uri) {
  if (cluster_on_postgres()) {
    const auto o = delayq::postgres_options::parse(uri);
    delayq::test::raw_postgres pg;
    return static_cast<int>(
        pg.count("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                 "WHERE application_name = 'delayq:" +
                 o.layout.schema + ":listen') x"));
  }
  raw_connection raw(uri);
  const std::string name = "name=delayq:" + raw.opts.prefix + ":listen ";
  std::istringstream clients(raw.run({"CLIENT", "LIST"}));
  int killed = 0;
  for (std::string line; std::getline(clients, line);) {
    if ((line + " ").find(name) == std::string::npos) continue;
    const std::string id = line.substr(3, line.find(' ') - 3);  // "id=N ..."
    raw.run({"CLIENT", "KILL", "ID", id});
    ++killed;
  }
  return killed;
}

// A lease table of another instance, `name`, that takes `shard` as soon as
// its lease lapses (expire_lease()); true once it holds it.
bool steal_shard(const std::string& uri, delayq::shard_leases& thief, std::uint32_t shard) {
  return eventually([&] {
    expire_lease(uri, shard);
    const delayq::lease_round r = thief.renew();
    return std::any_of(r.held.begin(), r.held.end(),
                       [&](const delayq::shard_lease& l) { return l.shard == shard; });
  });
}

// A thief's lease outlives the test: the shard does not come back to its
// old holder (and run the task there again) while the test looks.
constexpr std::chrono::milliseconds thief_lease{60'000};

// Opens a gate when the test leaves, failed REQUIRE or not: an attempt left
// blocked on it would make the engine's destructor wait forever.
struct open_at_exit {
  latch& l;
  ~open_at_exit() { l.release(); }
};

// One id in each shard.
std::vector<std::string> probe_ids() {
  std::vector<std::string> ids(test_shards);
  std::size_t found = 0;
  for (int k = 0; found < test_shards; ++k) {
    std::string id = "probe-" + std::to_string(k);
    std::string& slot = ids[delayq::shard_of(id, test_shards)];
    if (slot.empty()) {
      slot = std::move(id);
      ++found;
    }
  }
  return ids;
}

}  // namespace

TEST_CASE(
    "cluster: engines hold every shard once between them, only the owner answers on an id, "
    "and each names it") {
  const std::string uri = sharded_uri("cluster-hold");
  io_thread io;
  member a{"a"}, b{"b"}, c{"c"};
  start_member(a, io, uri);
  CHECK(a.eng->stats().shards_held == test_shards);  // alone: start() won them all
  start_member(b, io, uri);
  std::vector<member*> ms{&a, &b};
  SUBCASE("three") {
    start_member(c, io, uri);
    ms.push_back(&c);
  }
  SUBCASE("two") {}
  REQUIRE(wait_balanced(ms));
  std::vector<std::string> names;
  for (member* m : ms) names.push_back(m->name);

  const std::vector<std::string> probes = probe_ids();
  for (std::uint32_t s = 0; s < test_shards; ++s) {
    CAPTURE(s);
    const std::string owner = desired_owner(s, names);
    for (member* m : ms) {
      // Every engine names the owner, the one that answers below.
      CHECK(m->eng->owner_of(probes[s]) == owner);
      boost::system::error_code ec;
      const bool found = m->eng->cancel(probes[s], ec);
      CHECK_FALSE(found);
      if (m->name == owner) {
        CHECK_FALSE(ec);  // the owner answers: no such task
      } else {
        CHECK(ec == delayq::errc::not_owner);
        // Every call naming the id, a schedule with it too.
        delayq::schedule_options o;
        o.id = probes[s];
        boost::system::error_code sec;
        m->eng->schedule_at("t", "p", clock_type::now() + 1h, o, sec);
        CHECK(sec == delayq::errc::not_owner);
        m->eng->reschedule(probes[s], clock_type::now(), sec);
        CHECK(sec == delayq::errc::not_owner);
      }
    }
  }
  for (member* m : ms) m->eng->stop(patience);
}

TEST_CASE("cluster: 1000 tasks scheduled through three engines run once each, on their owner") {
  const std::string uri = sharded_uri("cluster-run");
  io_thread io;
  member a{"a"}, b{"b"}, c{"c"};
  start_member(a, io, uri);
  start_member(b, io, uri);
  start_member(c, io, uri);
  std::vector<member*> ms{&a, &b, &c};
  REQUIRE(wait_balanced(ms));
  const std::vector<std::string> names{"a", "b", "c"};

  constexpr std::size_t n = 1000;
  std::map<std::string, std::string> scheduled_on;  // id -> member
  for (std::size_t i = 0; i < n; ++i) {
    member& m = *ms[i % ms.size()];
    scheduled_on[m.eng->schedule("t", "p", std::chrono::milliseconds{0})] = m.name;
  }
  REQUIRE(scheduled_on.size() == n);
  std::size_t elsewhere = 0;  // scheduled on one member, owned by another
  for (const auto& [id, on] : scheduled_on)
    if (desired_owner(delayq::shard_of(id, test_shards), names) != on) ++elsewhere;
  CHECK(elsewhere > 0);

  REQUIRE(eventually([&] {
    std::size_t total = 0;
    for (member* m : ms) total += m->ran.snapshot().size();
    return total >= n;
  }));
  for (member* m : ms) m->eng->stop(patience);  // then nothing more can run
  std::map<std::string, int> runs;
  for (member* m : ms)
    for (const auto& r : m->ran.snapshot()) {
      ++runs[r.t.id];
      CHECK(desired_owner(delayq::shard_of(r.t.id, test_shards), names) == m->name);
    }
  CHECK(runs.size() == n);
  for (const auto& [id, count] : runs) {
    CAPTURE(id);
    CHECK(count == 1);
    CHECK(scheduled_on.count(id) == 1);
  }
}

TEST_CASE("cluster: shards and their tasks move when an engine joins and when one leaves") {
  const std::string uri = sharded_uri("cluster-move");
  io_thread io;
  member a{"a"}, b{"b"};
  start_member(a, io, uri);
  // Alone, a holds every shard: far tasks through it are all held there.
  constexpr std::size_t n = 200;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i)
    ids.push_back(a.eng->schedule("t", "p", std::chrono::hours{1}));
  CHECK(a.eng->pending() == n);

  // b joins: a lets go of the shards it gives away, b reads them in.
  start_member(b, io, uri);
  REQUIRE(wait_balanced({&a, &b}));
  std::size_t on_a = 0;
  for (const std::string& id : ids)
    if (desired_owner(delayq::shard_of(id, test_shards), {"a", "b"}) == "a") ++on_a;
  REQUIRE(on_a > 0);
  REQUIRE(on_a < n);
  CHECK(eventually([&] { return a.eng->pending() == on_a && b.eng->pending() == n - on_a; }));

  // b leaves: it releases its leases, a takes them at its next round and
  // reads their tasks in (just after it counts them held).
  b.eng->stop(patience);
  REQUIRE(eventually([&] { return a.eng->stats().shards_held == test_shards; }));
  CHECK(eventually([&] { return a.eng->pending() == n; }));
  // And it runs them: every one, brought forward.
  for (const std::string& id : ids) CHECK(a.eng->reschedule(id, clock_type::now()));
  REQUIRE(a.ran.wait_for_count(n));
  a.eng->stop(patience);
  CHECK(a.ran.snapshot().size() == n);
  CHECK(b.ran.snapshot().empty());
}

TEST_CASE("cluster: an outcome write refused by the fence (lease_lost) is dropped, not retried") {
  const std::string uri = sharded_uri("cluster-fence");
  io_thread io;
  member a{"a"};
  latch gate;
  std::atomic<bool> fail{false};
  delayq::executor_factory f;
  f.add("blocked", [&](const delayq::task&) {
    gate.enter_and_wait();
    if (fail) throw std::runtime_error("fails");
  });
  auto owned = std::make_unique<sharded_view>(uri);
  sharded_view& view = *owned;
  auto opts = member_options(a.name, 2);
  SUBCASE("the removal after a success") {}
  SUBCASE("the retry's save after a failure") { fail = true; }
  SUBCASE("the dead letter after the last failure") {
    fail = true;
    opts.retry.max_attempts = 1;
  }
  f.add("t", std::ref(a.ran));
  a.eng = std::make_unique<delayq::engine>(io.io, f, std::move(owned), opts);
  a.eng->start();
  auto reader = delayq::open_store(uri);
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {"x"});
  REQUIRE(gate.wait_entered(1));
  view.refuse_fenced = true;  // the shard's lease moved on while x ran
  gate.release();
  REQUIRE(eventually([&] { return view.refused.load() >= 1; }));
  // Unfenced writes still land (a schedule).
  a.eng->schedule("t", "p", std::chrono::hours{1}, {"x2"});
  CHECK(stored(*reader).count("x2") == 1);
  // The refused outcome is not kept for retry, and the task is not held
  // here any more: the store keeps it as it was, for the shard's owner.
  CHECK(eventually([&] { return a.eng->stats().writes_kept == 0 && a.eng->pending() == 1; }));
  CHECK(a.eng->stats().writes_kept == 0);
  const auto left = stored(*reader);
  REQUIRE(left.count("x") == 1);
  CHECK(left.at("x").attempts == 0);
  // No dead letter was written, and none is counted.
  CHECK_FALSE(reader->dead_letters()->find_dead("x").has_value());
  CHECK(a.eng->stats().dead == 0);
  CHECK(a.eng->stop(patience));
}

TEST_CASE(
    "cluster: a cancel, reschedule or replace refused by the fence fails and changes nothing") {
  const std::string uri = sharded_uri("cluster-call-fence");
  io_thread io;
  member a{"a"};
  auto owned = std::make_unique<sharded_view>(uri);
  sharded_view& view = *owned;
  start_member(a, io, std::move(owned));
  auto reader = delayq::open_store(uri);
  a.eng->schedule("t", "p", std::chrono::hours{1}, {"x"});
  const auto before = stored(*reader);
  REQUIRE(before.count("x") == 1);
  // Another instance took x's shard since this one's last round: the lease
  // still looks valid here, but the store refuses writes under its token.
  view.refuse_fenced = true;
  boost::system::error_code ec;
  SUBCASE("cancel") { CHECK_FALSE(a.eng->cancel("x", ec)); }
  SUBCASE("reschedule") {
    CHECK_FALSE(
        a.eng->reschedule("x", std::chrono::system_clock::now() + std::chrono::hours{2}, ec));
  }
  SUBCASE("replace") {
    delayq::schedule_options o{"x"};
    o.conflict = delayq::on_conflict::replace;
    a.eng->schedule("t", "other", std::chrono::hours{3}, o, ec);
  }
  CHECK(ec == delayq::errc::lease_lost);
  CHECK(view.refused.load() >= 1);
  // The store still holds x as it was, for the shard's new owner.
  const auto after = stored(*reader);
  REQUIRE(after.count("x") == 1);
  CHECK(after.at("x").payload == "p");
  CHECK(after.at("x").due == before.at("x").due);
  view.refuse_fenced = false;
  CHECK(a.eng->stop(patience));
}

TEST_CASE("cluster: an attempt whose shard was taken meanwhile gets lease_lost on its outcome") {
  const std::string uri = sharded_uri("cluster-taken");
  io_thread io;
  member a{"a"};
  latch gate;
  std::atomic<bool> fail{false};
  delayq::executor_factory f;
  f.add("blocked", [&](const delayq::task&) {
    gate.enter_and_wait();
    if (fail) throw std::runtime_error("fails");
  });
  start_member(a, io, delayq::open_store(uri), f);
  SUBCASE("the removal after a success") {}
  SUBCASE("the retry's save after a failure") { fail = true; }
  // An id whose shard a second instance, "thief", should own.
  std::string id;
  std::uint32_t shard = 0;
  for (int k = 0; id.empty(); ++k) {
    const std::string candidate = "taken-" + std::to_string(k);
    shard = delayq::shard_of(candidate, test_shards);
    if (desired_owner(shard, {"a", "thief"}) == "thief") id = candidate;
  }
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {id});
  REQUIRE(gate.wait_entered(1));

  // While the attempt runs, the thief joins. a keeps the shard while its
  // attempt runs (a hand-over waits for it), so a's lease is made to lapse,
  // as in a stall, and the thief takes the shard with a new token.
  auto thief = other_leases(uri, delayq::cluster_options{test_shards, thief_lease, "thief"});
  REQUIRE(steal_shard(uri, *thief, shard));
  gate.release();
  // a's outcome write carries its old token: refused, dropped, not kept.
  CHECK(eventually([&] {
    const auto s = a.eng->stats();
    return (fail ? s.failed : s.succeeded) == 1 && s.writes_queued == 0 && a.eng->pending() == 0;
  }));
  CHECK(a.eng->stats().writes_kept == 0);
  auto reader = delayq::open_store(uri);
  const auto left = stored(*reader);
  REQUIRE(left.count(id) == 1);  // as it was: the thief's to run
  CHECK(left.at(id).attempts == 0);
  CHECK(a.eng->stop(patience));
  thief->release_all();
}

TEST_CASE(
    "cluster: an attempt that settles after its shard was lost and taken again does not run "
    "again") {
  // The faults harness's partition-redis: an instance cut off from the store
  // loses its leases while an attempt runs; another instance runs the task
  // and finishes it; the first takes the shard again (a new token) and reads
  // it while its own attempt is still out (that record is skipped: memory is
  // newer). Then the attempt fails, and its retry's write fails too (the
  // store is unreachable, so the write is kept): the earlier tenure's copy
  // must not be armed and run again under the new token.
  const std::string uri = sharded_uri("cluster-stale-retry");
  io_thread io;
  member a{"a"};
  latch gate;
  delayq::executor_factory f;
  f.add("blocked", [&](const delayq::task&) {
    gate.enter_and_wait();
    throw std::runtime_error("fails");
  });
  open_at_exit opener{gate};
  auto owned = std::make_unique<sharded_view>(uri);
  sharded_view& view = *owned;
  // One worker: what fires runs in due order, so the probe below runs only
  // after anything due before it.
  start_member(a, io, std::move(owned), f, 1);
  std::uint32_t shard = 0;
  const std::string x = id_owned_by("a", {"a"}, "stale-x", &shard);
  const std::string probe = id_owned_by("a", {"a"}, "stale-probe", nullptr, x);
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {x});
  REQUIRE(gate.wait_entered(1));

  // a stalls past its lease and a process under a's own name takes the
  // shard (as in the lapsed test above): a's next round finds it lost.
  auto thief = other_leases(uri, delayq::cluster_options{test_shards, thief_lease, "a"});
  REQUIRE(steal_shard(uri, *thief, shard));
  REQUIRE(eventually([&] { return a.eng->stats().shards_lost >= 1; }));
  const std::uint64_t gained_before = a.eng->stats().shards_gained;
  // The other process ran x and finished it, then let the shard go; a takes
  // it again and reads it while x's attempt is still out.
  auto reader = delayq::open_store(uri);
  const std::string ids[] = {x};
  reader->remove(ids);
  thief->release_all();
  REQUIRE(eventually([&] { return a.eng->stats().shards_gained > gained_before; }));

  // The attempt fails; its retry's write finds the store unreachable.
  view.unreachable_fenced = true;
  gate.release();
  REQUIRE(eventually([&] { return a.eng->stats().failed == 1 && a.eng->pending() == 0; }));
  view.unreachable_fenced = false;  // the kept write is refused by the fence now

  // A probe of the same shard due after x's retry runs; x did not run again
  // before it, and is neither held nor stored.
  a.eng->schedule("t", "p", std::chrono::milliseconds{20}, {probe});
  REQUIRE(a.ran.wait_for_count(1));
  CHECK(gate.entered_so_far() == 1);
  CHECK_FALSE(a.eng->find(x).has_value());
  CHECK(stored(*reader).count(x) == 0);
  CHECK(a.eng->stop(patience));
}

TEST_CASE("cluster: a shard is handed over only once the attempt running on it settled") {
  const std::string uri = sharded_uri("cluster-handover");
  io_thread io;
  member a{"a"}, b{"b"};
  latch gate;
  delayq::executor_factory fa;
  fa.add("blocked", [&](const delayq::task&) { gate.enter_and_wait(); });
  open_at_exit opener{gate};  // a failed REQUIRE must not leave x blocked
  recorder b_blocked;
  delayq::executor_factory fb;
  fb.add("blocked", std::ref(b_blocked));
  start_member(a, io, delayq::open_store(uri), fa);
  // x runs on a, in a shard b should own once it joins.
  std::uint32_t shard = 0;
  const std::string x = id_owned_by("b", {"a", "b"}, "handover-x", &shard);
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {x});
  REQUIRE(gate.wait_entered(1));

  start_member(b, io, delayq::open_store(uri), fb);
  // a keeps the shard while x runs: leaving, not released.
  REQUIRE(eventually([&] { return a.eng->stats().shards_leaving == 1; }));
  // y, of the same shard, comes due on a meanwhile: no attempt starts on a
  // leaving shard, so a holds it back for the new owner.
  const std::string y = id_owned_by("b", {"a", "b"}, "handover-y", nullptr, x);
  a.eng->schedule("t", "p", std::chrono::milliseconds{0}, {y});
  // b had rounds enough to take the shard had a let go of it: it holds all
  // its other shards, not this one.
  std::size_t want_b = 0;
  for (std::uint32_t s = 0; s < test_shards; ++s)
    if (desired_owner(s, {"a", "b"}) == "b") ++want_b;
  const auto rounds = b.eng->stats().lease_rounds;
  REQUIRE(eventually([&] { return b.eng->stats().lease_rounds >= rounds + 3; }));
  CHECK(b.eng->stats().shards_held == want_b - 1);
  CHECK(a.eng->stats().shards_leaving == 1);

  // x ends: a's removal lands, then a hands the shard over; b reads it and
  // runs y, and never x.
  gate.release();
  REQUIRE(wait_balanced({&a, &b}));
  REQUIRE(b.ran.wait_for_count(1));
  CHECK(b.ran.ids() == std::vector<std::string>{y});
  CHECK(a.ran.snapshot().empty());
  CHECK(a.eng->stats().succeeded == 1);
  CHECK(a.eng->stats().shards_leaving == 0);
  // Once b read the shard (a round after it took it), x was not there.
  const auto taken = b.eng->stats().lease_rounds;
  REQUIRE(eventually([&] { return b.eng->stats().lease_rounds >= taken + 2; }));
  CHECK(b_blocked.snapshot().empty());
  CHECK(a.eng->stop(patience));
  CHECK(b.eng->stop(patience));
}

TEST_CASE(
    "cluster: a leaving shard is handed over as its last attempt settles, not a round later") {
  // Its due tasks are held back from the round that finds it leaving until
  // the next owner has read it, so every round waited here makes them later
  // (a stalled instance that resumed gets its shards back this way).
  const std::string uri = sharded_uri("cluster-handover-now");
  constexpr std::chrono::milliseconds lease{3000};  // a round every second
  io_thread io;
  member a{"a"}, b{"b"};
  latch gate;
  delayq::executor_factory fa;
  fa.add("blocked", [&](const delayq::task&) { gate.enter_and_wait(); });
  open_at_exit opener{gate};  // a failed REQUIRE must not leave x blocked
  start_member(a, io, delayq::open_store(uri), fa, 2, lease);
  // x runs on a, in a shard b should own once it joins.
  const std::string x = id_owned_by("b", {"a", "b"}, "handover-now-x");
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {x});
  REQUIRE(gate.wait_entered(1));
  start_member(b, io, delayq::open_store(uri), {}, 2, lease);
  REQUIRE(eventually([&] { return a.eng->stats().shards_leaving == 1; }));

  // x ends just after a round of a's: a lets the shard go at once, well
  // before its next round (lease/3 later).
  const auto rounds = a.eng->stats().lease_rounds;
  REQUIRE(eventually([&] { return a.eng->stats().lease_rounds > rounds; }));
  const auto released = std::chrono::steady_clock::now();
  gate.release();
  REQUIRE(eventually([&] { return a.eng->stats().shards_leaving == 0; }));
  CHECK(std::chrono::steady_clock::now() - released < lease / 6);
  CHECK(a.eng->stats().succeeded == 1);
  REQUIRE(wait_balanced({&a, &b}));
  CHECK(b.ran.snapshot().empty());  // x ran once, on a
  CHECK(a.eng->stop(patience));
  CHECK(b.eng->stop(patience));
}

TEST_CASE("cluster: a task queued when its shard's lease lapsed does not start") {
  const std::string uri = sharded_uri("cluster-lapsed");
  io_thread io;
  member a{"a"};
  latch gate;
  delayq::executor_factory f;
  f.add("blocked", [&](const delayq::task&) { gate.enter_and_wait(); });
  open_at_exit opener{gate};  // a failed REQUIRE must not leave x blocked
  // One worker: x occupies it, so y waits in the ready queue.
  start_member(a, io, delayq::open_store(uri), f, 1);
  std::uint32_t shard = 0;
  const std::string x = id_owned_by("a", {"a"}, "lapsed-x", &shard);
  const std::string y = id_owned_by("a", {"a"}, "lapsed-y", nullptr, x);
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {x});
  REQUIRE(gate.wait_entered(1));
  a.eng->schedule("t", "p", std::chrono::milliseconds{0}, {y});
  REQUIRE(eventually([&] { return a.eng->stats().ready == 1; }));

  // a stalls past its lease (as SIGSTOP would) and another process takes the
  // shard: one under a's own name (a restart of a while it stalled), so
  // that nothing else changes hands and a has nothing to give away; a's
  // next round finds the shard lost.
  auto thief = other_leases(uri, delayq::cluster_options{test_shards, thief_lease, "a"});
  REQUIRE(steal_shard(uri, *thief, shard));
  REQUIRE(eventually([&] { return a.eng->stats().shards_lost >= 1; }));
  CHECK(a.eng->stats().shards_leaving == 0);

  // The worker frees up: y, queued under the lost lease, does not start.
  gate.release();
  REQUIRE(eventually([&] {
    const auto st = a.eng->stats();
    return st.running == 0 && st.ready == 0 && a.eng->pending() == 0;
  }));
  CHECK(a.ran.snapshot().empty());
  auto reader = delayq::open_store(uri);
  const auto left = stored(*reader);
  REQUIRE(left.count(y) == 1);  // as it was: the thief's to run
  CHECK(left.at(y).attempts == 0);
  CHECK(a.eng->stop(patience));
  thief->release_all();
}

TEST_CASE("cluster: on_settings_changed: after start, per change, after a lost notice, a failure") {
  const std::string uri = sharded_uri("cluster-settings");
  io_thread io;
  recorder changed;  // one entry per call
  std::atomic<bool> fail_once{false};
  auto o = member_options("a");
  o.on_settings_changed = [&] {
    // Decided before the call is counted: once the test saw a call, the
    // flag it sets next is taken by a later one.
    const bool ok = !fail_once.exchange(false);
    changed(delayq::task{});
    return ok;
  };
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::engine eng(io.io, f, delayq::open_store(uri), o);
  eng.start();
  // Once after start: a change made before the engine subscribed is read.
  REQUIRE(changed.wait_for_count(1));

  // Another instance's store saves a setting.
  auto other = delayq::open_store(uri);
  boost::system::error_code ec;
  other->settings()->save_setting("push:t", "{}", ec);
  REQUIRE_FALSE(ec);
  REQUIRE(changed.wait_for_count(2));

  // A reread that fails is tried again.
  const std::size_t before_erase = changed.snapshot().size();
  fail_once = true;
  other->settings()->erase_setting("push:t", ec);
  REQUIRE_FALSE(ec);
  REQUIRE(changed.wait_for_count(before_erase + 2));
  CHECK_FALSE(fail_once.load());

  // The notice connection breaks: what was sent meanwhile may be lost, so
  // the engine says a setting may have changed once it is back.
  const std::size_t before_kill = changed.snapshot().size();
  REQUIRE(kill_listeners(uri) == 1);
  REQUIRE(changed.wait_for_count(before_kill + 1));
  eng.stop(patience);
}

TEST_CASE("cluster: a slow shard read does not hold up the lease rounds") {
  const std::string uri = sharded_uri("cluster-slow-read");
  io_thread io;
  member a{"a"}, b{"b"};
  start_member(a, io, uri);
  // A task in every shard, so that b has something to read in.
  const std::vector<std::string> probes = probe_ids();
  for (const std::string& id : probes) {
    delayq::schedule_options o;
    o.id = id;
    a.eng->schedule_at("t", "p", clock_type::now() + 1h, o);
  }
  auto view = std::make_unique<sharded_view>(uri);
  sharded_view& v = *view;
  // b starts holding nothing (a holds every live lease), then gains its
  // share from a; the reads of those shards wait at the gate.
  start_member(b, io, std::move(view));
  v.gate_reads = true;
  struct release_at_exit {
    sharded_view& v;
    ~release_at_exit() {
      v.finds.release();
      v.reads.release();
    }
  } release{v};
  REQUIRE(v.reads.wait_entered(1));
  // The rounds go on meanwhile, and b keeps what it holds.
  const std::uint64_t rounds = b.eng->stats().lease_rounds;
  REQUIRE(eventually([&] { return b.eng->stats().lease_rounds >= rounds + 3; }));
  CHECK(b.eng->stats().shards_held > 0);
  CHECK(b.eng->stats().shards_lost == 0);

  // A status() of a task of a shard not read yet asks the store; the
  // shard's read holds the task before the store answers: the wheel then
  // answers (not "no such task").
  const std::vector<std::string> names{"a", "b"};
  const auto owned_by_b = [&](const std::string& id) {
    return desired_owner(delayq::shard_of(id, test_shards), names) == "b";
  };
  const auto on_b =
      static_cast<std::size_t>(std::count_if(probes.begin(), probes.end(), owned_by_b));
  REQUIRE(on_b > 0);
  const std::string asked = *std::find_if(probes.begin(), probes.end(), owned_by_b);
  v.gate_finds = true;
  auto status = std::async(std::launch::async, [&] { return b.eng->status(asked); });
  // Before the future's destructor waits for the call, on a failed REQUIRE.
  release_at_exit release_first{v};
  REQUIRE(v.finds.wait_entered(1));

  // Once the reads go through, b holds its shards' tasks.
  v.reads.release();
  REQUIRE(wait_balanced({&a, &b}));
  CHECK(eventually([&] { return b.eng->stats().pending == on_b; }));
  v.finds.release();
  const auto st = status.get();
  REQUIRE(st.has_value());
  CHECK(st->task.id == asked);
  CHECK(st->state == delayq::task_state::delayed);
  CHECK(eventually([&] { return a.eng->stats().pending == probes.size() - on_b; }));
  a.eng->stop(patience);
  b.eng->stop(patience);
}

TEST_CASE("cluster: a shard the store cannot read does not hold up the others gained with it") {
  // The shards gained together are read together (one call for all of
  // them); one that fails must not keep the others unread round after round.
  const std::string uri = sharded_uri("cluster-bad-shard");
  io_thread io;
  member a{"a"}, b{"b"};
  start_member(a, io, uri);
  const std::vector<std::string> probes = probe_ids();  // one in every shard
  for (const std::string& id : probes) {
    delayq::schedule_options o;
    o.id = id;
    a.eng->schedule_at("t", "p", clock_type::now() + 1h, o);
  }
  const std::vector<std::string> names{"a", "b"};
  std::uint32_t broken = 0;
  while (desired_owner(broken, names) != "b") ++broken;
  auto view = std::make_unique<sharded_view>(uri);
  sharded_view& v = *view;
  v.broken_shard = static_cast<int>(broken);
  start_member(b, io, std::move(view));
  REQUIRE(wait_balanced({&a, &b}));
  const auto on_b = static_cast<std::size_t>(
      std::count_if(probes.begin(), probes.end(), [&](const std::string& id) {
        return desired_owner(delayq::shard_of(id, test_shards), names) == "b";
      }));
  REQUIRE(on_b > 1);
  // Every shard of b's is read but the broken one...
  CHECK(eventually([&] { return b.eng->stats().pending == on_b - 1; }));
  // ... which is read once it can be.
  v.broken_shard = -1;
  CHECK(eventually([&] { return b.eng->stats().pending == on_b; }));
  a.eng->stop(patience);
  b.eng->stop(patience);
}
