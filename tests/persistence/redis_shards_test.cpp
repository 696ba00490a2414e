// The sharded layout of redis_store (redis_options::shards): the shard
// count in the meta key, writes split by shard with fencing, the notices,
// list_due_shard() and the merges. The conformance suites run on a sharded
// store as well (store_fixtures.hpp, redis_sharded_fixture); these are the
// promises only a sharded store makes.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "delayq/open_store.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/schedule_store.hpp"
#include "freezing_proxy.hpp"
#include "store_fixtures.hpp"
#include "test_support.hpp"

namespace delayq::test {
namespace {

constexpr std::uint32_t shard_count = 8;

redis_options sharded(const std::string& prefix, std::uint32_t shards = shard_count) {
  redis_options o = redis_test_options(prefix);
  o.shards = shards;
  return o;
}

// sharded(prefix), reached through `proxy`.
redis_options sharded_through(const freezing_proxy& proxy, const std::string& prefix) {
  redis_options o = sharded(prefix);
  o.host = "127.0.0.1";
  o.port = proxy.port();
  return o;
}

// `n` tasks "STEM0", "STEM1", ... of payload "p", task i due at
// (i * step) % mod ms, saved in `store`.
std::vector<task> save_spread(redis_store& store, const std::string& stem, int n, int step,
                              int mod) {
  std::vector<task> tasks;
  for (int i = 0; i < n; ++i)
    tasks.push_back(make_task(stem + std::to_string(i), "p", (i * step) % mod));
  store.save(tasks);
  return tasks;
}

// A task's place in due order: (due ms, id).
std::pair<std::int64_t, std::string> due_key(const task& t) {
  return std::make_pair(to_epoch_ms(t.due), t.id);
}

// The first ids "PREFIX-0", "PREFIX-1", ... that fall in shard `s`.
std::vector<std::string> ids_in_shard(std::uint32_t s, std::size_t n,
                                      const std::string& stem = "id") {
  std::vector<std::string> out;
  for (int i = 0; out.size() < n; ++i) {
    std::string id = stem + "-" + std::to_string(i);
    if (shard_of(id, shard_count) == s) out.push_back(std::move(id));
  }
  return out;
}

std::string shard_key(const std::string& prefix, std::uint32_t s, const char* name) {
  return "{" + prefix + ":" + std::to_string(s) + "}:" + name;
}

// Drops every key of a sharded store.
struct cleanup {
  raw_redis& raw;
  std::string prefix;
  ~cleanup() {
    raw.drop_prefix(prefix);
    for (std::uint32_t s = 0; s < shard_count; ++s) {
      raw.drop_prefix(prefix + ":" + std::to_string(s));
      raw.run({"DEL", shard_key(prefix, s, "lease")});
    }
  }
};

// Kills the listener connections of a store with this prefix.
int kill_listeners(raw_redis& raw, const std::string& prefix) {
  auto list = raw.get({"CLIENT", "LIST"});
  REQUIRE(list);
  int killed = 0;
  std::size_t pos = 0;
  while (pos < list->size()) {
    std::size_t end = list->find('\n', pos);
    if (end == std::string::npos) end = list->size();
    const std::string line = list->substr(pos, end - pos);
    pos = end + 1;
    if (line.find(" name=delayq:" + prefix + ":listen ") == std::string::npos) continue;
    const std::string id = line.substr(3, line.find(' ') - 3);
    killed += static_cast<int>(raw.integer({"CLIENT", "KILL", "ID", id}));
  }
  return killed;
}

}  // namespace

TEST_CASE("redis shards: shards=N in the URI") {
  CHECK(redis_options::parse("redis://127.0.0.1:6379/0?shards=8").shards == 8);
  CHECK(redis_options::parse("redis://127.0.0.1:6379/0").shards == 0);
  CHECK(redis_options::parse("redis://127.0.0.1:6379/0?prefix=a&shards=16384").shards == 16384);
  CHECK(redis_options::parse("redis://127.0.0.1:6379/0?shards=3").describe() ==
        "redis://127.0.0.1:6379/0?shards=3");
  for (const char* bad : {"redis://h/0?shards=0", "redis://h/0?shards=16385",
                          "redis://h/0?shards=x", "redis://h/0?shards="}) {
    boost::system::error_code ec;
    std::string why;
    redis_options::parse(bad, ec, &why);
    CHECK_MESSAGE(ec == errc::invalid_store_uri, bad);
    CHECK_MESSAGE(why.find("shards") != std::string::npos, why);
  }
}

TEST_CASE("redis shards: a store refuses to open with another shard count") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shm");
  cleanup clean{raw, prefix};
  SUBCASE("created with 8, opened with 0 and 4") {
    { redis_store created(sharded(prefix)); }
    CHECK(raw.get({"HGET", "{" + prefix + "}:meta", "shards"}) == "8");
    for (std::uint32_t other : {0u, 4u}) {
      boost::system::error_code ec;
      std::string why;
      CHECK(redis_store::open(sharded(prefix, other), ec, &why) == nullptr);
      CHECK(ec == errc::shard_mismatch);
      CHECK_MESSAGE(why.find("created with 8 shards") != std::string::npos, why);
      CHECK_MESSAGE(why.find("not the " + std::to_string(other)) != std::string::npos, why);
    }
    boost::system::error_code ec;
    CHECK(redis_store::open(sharded(prefix), ec) != nullptr);
    CHECK_FALSE(ec);
  }
  SUBCASE("created unsharded, opened with 8") {
    { redis_store created(redis_test_options(prefix)); }
    // The unsharded meta key is what it always was: no shards field.
    CHECK_FALSE(raw.get({"HGET", "{" + prefix + "}:meta", "shards"}).has_value());
    boost::system::error_code ec;
    std::string why;
    CHECK(redis_store::open(sharded(prefix), ec, &why) == nullptr);
    CHECK(ec == errc::shard_mismatch);
    CHECK_MESSAGE(why.find("created with 0 shards") != std::string::npos, why);
  }
}

TEST_CASE("redis shards: a batch spanning shards lands in each shard's keys") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shw");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  CHECK(store.sharded()->shards() == shard_count);
  const auto a = ids_in_shard(1, 2), b = ids_in_shard(5, 1);
  std::vector<task> tasks{make_task(a[0]), make_task(b[0]), make_task(a[1])};
  std::vector<store_change> changes;
  for (const task& t : tasks) changes.push_back({change_kind::save, &t});
  store.write(changes);
  CHECK(raw.integer({"HLEN", shard_key(prefix, 1, "tasks")}) == 2);
  CHECK(raw.integer({"ZCARD", shard_key(prefix, 1, "due")}) == 2);
  CHECK(raw.integer({"HEXISTS", shard_key(prefix, 5, "tasks"), b[0]}) == 1);
  CHECK(raw.integer({"EXISTS", "{" + prefix + "}:tasks"}) == 0);
  // Remove one, bury another, in one batch over two shards.
  const dead_letter d = make_letter(b[0]);
  std::vector<store_change> more{{change_kind::remove, &tasks[0]},
                                 {change_kind::bury, &d.task, d.error, d.died_at}};
  store.write(more);
  CHECK(raw.integer({"HLEN", shard_key(prefix, 1, "tasks")}) == 1);
  CHECK(raw.integer({"HEXISTS", shard_key(prefix, 5, "dead"), b[0]}) == 1);
  CHECK(store.dead_letters()->count_dead() == 1);
  REQUIRE(store.dead_letters()->find_dead(b[0]).has_value());
  boost::system::error_code ec;
  auto found = store.find(std::vector<std::string>{a[1], b[0], a[0]}, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(found.size() == 3);
  CHECK(found[0].has_value());
  CHECK_FALSE(found[1].has_value());
  CHECK_FALSE(found[2].has_value());
}

TEST_CASE("redis shards: a fenced write lands with the lease's token and is refused with another") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shf");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  // Shard 2's lease, taken through the lease table.
  cluster_options cluster;
  cluster.shards = shard_count;
  cluster.instance = "me";
  cluster.lease = std::chrono::milliseconds{60'000};
  boost::system::error_code ec;
  auto leases = store.sharded()->make_shard_leases(cluster, ec);
  REQUIRE_MESSAGE(leases, ec.message());
  const std::string lease_key = shard_key(prefix, 2, "lease");
  REQUIRE(lease_key == redis_lease_key(prefix, 2));
  raw.run({"HSET", lease_key, "token", "7", "owner", "me"});

  const auto mine = ids_in_shard(2, 3), other = ids_in_shard(6, 1);
  const task t0 = make_task(mine[0]), t1 = make_task(mine[1]), t2 = make_task(mine[2]);
  const task u = make_task(other[0]);
  store.save(std::vector{t1});

  SUBCASE("the lease's token: lands") {
    std::vector<store_change> changes{{change_kind::save, &t0, {}, {}, 7},
                                      {change_kind::remove, &t1, {}, {}, 7}};
    store.write(changes, ec);
    CHECK_FALSE(ec);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 2, "tasks"), mine[0]}) == 1);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 2, "tasks"), mine[1]}) == 0);
    CHECK_FALSE(changes[0].refused);
    CHECK_FALSE(changes[1].refused);
  }
  SUBCASE("a stale token: lease_lost, nothing of the shard, the other shard lands") {
    raw.run({"HSET", lease_key, "token", "8"});  // another instance took it
    std::vector<store_change> changes{{change_kind::save, &t0, {}, {}, 7},
                                      {change_kind::save, &u},
                                      {change_kind::remove, &t1, {}, {}, 7},
                                      // An unfenced change of the fenced shard goes with it.
                                      {change_kind::save, &t2}};
    log_capture logs;
    store.write(changes, ec);
    CHECK(ec == errc::lease_lost);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 2, "tasks"), mine[0]}) == 0);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 2, "tasks"), mine[1]}) == 1);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 2, "tasks"), mine[2]}) == 0);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 6, "tasks"), other[0]}) == 1);
    CHECK(logs.contains("no longer carries token 7"));
    // Counted at the store, in the lease hash, once per refused call.
    CHECK(raw.get({"HGET", lease_key, "fence_refused"}) == "1");
    // The refused shard's changes are marked, the landed ones not: the
    // engine's writer drops or writes again only what was refused.
    CHECK(changes[0].refused);
    CHECK_FALSE(changes[1].refused);
    CHECK(changes[2].refused);
    CHECK(changes[3].refused);
    // async_write() reports the same.
    std::promise<boost::system::error_code> done;
    store.async_write(changes, [&](boost::system::error_code e) { done.set_value(e); });
    CHECK(done.get_future().get() == errc::lease_lost);
    CHECK(raw.get({"HGET", lease_key, "fence_refused"}) == "2");
  }
  SUBCASE("unfenced changes never read the lease") {
    raw.run({"DEL", lease_key});
    raw.run({"SET", lease_key, "not a hash"});  // a fence check would fail on it
    store.save(std::vector{t0, u}, ec);
    CHECK_FALSE(ec);
    raw.run({"DEL", lease_key});
  }
}

TEST_CASE(
    "redis shards: a shard's failed part makes the batch outcome_unknown when another landed") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shu");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  const auto a = ids_in_shard(1, 1), b = ids_in_shard(4, 1);
  const task ta = make_task(a[0]), tb = make_task(b[0]);
  // Shard 4's tasks key holds a string: its part fails its type check.
  raw.run({"SET", shard_key(prefix, 4, "tasks"), "in the way"});
  boost::system::error_code ec;
  log_capture logs;
  SUBCASE("only the failing shard: its own error") {
    store.save(std::vector{tb}, ec);
    CHECK(ec == errc::store_error);
  }
  SUBCASE("with a shard that lands: outcome_unknown") {
    store.save(std::vector{ta, tb}, ec);
    CHECK(ec == errc::outcome_unknown);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 1, "tasks"), a[0]}) == 1);
    CHECK(logs.contains("write to shard 4 failed"));
  }
  SUBCASE("a stale token and a failure: the failure wins") {
    raw.run({"HSET", shard_key(prefix, 1, "lease"), "token", "2"});
    std::vector<store_change> changes{{change_kind::save, &ta, {}, {}, 1},
                                      {change_kind::save, &tb}};
    store.write(changes, ec);
    CHECK(ec == errc::store_error);
    CHECK(raw.integer({"HEXISTS", shard_key(prefix, 1, "tasks"), a[0]}) == 0);
  }
  raw.run({"DEL", shard_key(prefix, 4, "tasks")});
}

TEST_CASE(
    "redis shards: a write that ran and lost its reply with the connection is not run again") {
  // Found by the fault harness (link-lossy): a sharded write whose reply was
  // lost with its connection was run once more on a new one; the task it
  // saved had been run and removed by its shard's owner meanwhile, and came
  // back. Sent whole, then lost: outcome_unknown, never run twice.
  raw_redis raw;
  const std::string prefix = unique_prefix("shlost");
  cleanup clean{raw, prefix};
  freezing_proxy proxy(redis_options::parse(redis_test_uri()).port);
  redis_store store(sharded_through(proxy, prefix));
  const auto ids = ids_in_shard(3, 2);
  const task warm = make_task(ids[0]), t = make_task(ids[1]);
  boost::system::error_code ec;
  store.save(std::vector{warm}, ec);
  REQUIRE_FALSE(ec);

  proxy.drop_replies();
  auto written = std::async(std::launch::async, [&] {
    boost::system::error_code e;
    std::vector<store_change> changes{{change_kind::save, &t}};
    store.write(changes, e);
    return e;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (raw.integer({"HEXISTS", shard_key(prefix, 3, "tasks"), t.id}) == 0) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Its owner ran it and removed it; then the reply is lost with the connection.
  raw.run({"HDEL", shard_key(prefix, 3, "tasks"), t.id});
  raw.run({"ZREM", shard_key(prefix, 3, "due"), t.id});
  proxy.close_open();
  CHECK(written.get() == errc::outcome_unknown);
  CHECK_MESSAGE(raw.integer({"HEXISTS", shard_key(prefix, 3, "tasks"), t.id}) == 0,
                "the write ran a second time and brought the removed task back");
  // The next write goes on a new connection.
  store.save(std::vector{t}, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("redis shards: a takeover's reads cost one round trip for every shard on one server") {
  // Found by the fault harness (issue 33): an instance whose Redis link was
  // slowed took over a cut-off instance's shards and read them one by one,
  // while the schedule keeper counted and scanned the schedules a round
  // trip a shard, holding the store's connection for 32 of them (13 s on
  // that link). Each is one round trip for all the shards now.
  raw_redis raw;
  const std::string prefix = unique_prefix("shrt");
  cleanup clean{raw, prefix};
  freezing_proxy proxy(redis_options::parse(redis_test_uri()).port);
  redis_store store(sharded_through(proxy, prefix));
  schedule_store* schedules = store.schedules();
  REQUIRE(schedules != nullptr);
  // A task and a schedule in every shard; the writes warm the connection.
  std::vector<task> tasks;
  std::vector<std::string> ids;
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    ids.push_back(ids_in_shard(s, 1, "rt")[0]);
    tasks.push_back(make_task(ids.back(), "p", s));
  }
  boost::system::error_code ec;
  store.save(tasks, ec);
  REQUIRE_FALSE(ec);
  for (const std::string& id : ids) {
    schedule_write w;
    w.what = schedule_write::kind::put;
    w.id = id;
    w.definition = "def";
    w.state = "st";
    schedules->write_schedules(std::span<const schedule_write>(&w, 1), ec);
    REQUIRE_FALSE(ec);
  }
  // At most 2: a pipeline written in two pieces is still one wait. One
  // call a shard would be 8.
  proxy.reset_turns();
  CHECK(schedules->count_schedules(ec) == shard_count);
  REQUIRE_FALSE(ec);
  CHECK(proxy.up_turns() <= 2);

  proxy.reset_turns();
  std::size_t seen = 0;
  schedules->scan_schedules(
      100, [&](std::vector<schedule_record>& page) { seen += page.size(); }, ec);
  REQUIRE_FALSE(ec);
  CHECK(seen == shard_count);
  CHECK(proxy.up_turns() <= 2);

  std::vector<std::uint32_t> all(shard_count);
  for (std::uint32_t s = 0; s < shard_count; ++s) all[s] = s;
  std::vector<due_cursor> after(shard_count);
  std::size_t read = 0;
  // Once so that the server has the page script (a NOSCRIPT reply costs
  // the EVAL's round trip on a fresh connection), then counted.
  store.sharded()->list_due_shards(
      all, after, INT64_MAX, 100, [&](std::size_t, task&&) { ++read; }, ec);
  REQUIRE_FALSE(ec);
  std::vector<due_cursor> again(shard_count);
  read = 0;
  proxy.reset_turns();
  store.sharded()->list_due_shards(
      all, again, INT64_MAX, 100, [&](std::size_t, task&&) { ++read; }, ec);
  REQUIRE_FALSE(ec);
  CHECK(read == shard_count);
  CHECK(proxy.up_turns() <= 2);
}

TEST_CASE("redis shards: make_shard_leases checks the shard count") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shl");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  cluster_options cluster;
  cluster.shards = 4;
  boost::system::error_code ec;
  CHECK(store.sharded()->make_shard_leases(cluster, ec) == nullptr);
  CHECK(ec == errc::shard_mismatch);
  // An unsharded store offers no shards role at all.
  redis_store plain(redis_test_options(prefix + "p"));
  CHECK(plain.sharded() == nullptr);
  raw.drop_prefix(prefix + "p");
}

TEST_CASE("redis shards: listen() gets a notice per saved task, with its shard and due time") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shn");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  boost::system::error_code ec;
  auto listener = store.sharded()->listen(ec);
  REQUIRE_MESSAGE(listener, ec.message());
  // Nothing yet: the wait times out empty.
  CHECK(listener->wait(std::chrono::milliseconds{1}, ec).empty());
  CHECK_FALSE(ec);

  const std::string a = ids_in_shard(0, 1, "n")[0];
  const std::string b = ids_in_shard(3, 1, "n with spaces")[0];
  store.save(std::vector{make_task(a, "p", 1'000), make_task(b, "p", -2'000)});
  store.remove(std::vector{a});  // no notice
  std::map<std::string, task_notice> got;
  while (got.size() < 2) {
    auto batch = listener->wait(std::chrono::milliseconds{10'000}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE_MESSAGE(!batch.empty(), "no notice for 10 s");
    for (task_notice& n : batch) {
      std::string id = n.id;
      got.emplace(std::move(id), std::move(n));
    }
    REQUIRE_MESSAGE(!ec, ec.message());
  }
  REQUIRE(got.count(a) == 1);
  REQUIRE(got.count(b) == 1);
  CHECK(got[a].kind == notice_kind::task);
  CHECK(got[a].shard == 0);
  CHECK(got[a].due_ms == 1'000);
  CHECK(got[b].shard == 3);
  CHECK(got[b].due_ms == -2'000);

  // A broken connection: reported once, then the next wait reconnects.
  REQUIRE(kill_listeners(raw, prefix) == 1);
  bool broke = false;
  while (!broke) {
    listener->wait(std::chrono::milliseconds{10'000}, ec);
    broke = ec == errc::store_unavailable;
    REQUIRE_MESSAGE((!ec || broke), ec.message());
  }
  CHECK(listener->wait(std::chrono::milliseconds{1}, ec).empty());  // reconnects
  CHECK_FALSE(ec);
  store.dead_letters()->revive(std::vector{make_task(a, "p", 5)});
  std::vector<task_notice> after;
  while (after.empty()) {
    after = listener->wait(std::chrono::milliseconds{10'000}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
  }
  CHECK(after[0].id == a);
  CHECK(after[0].due_ms == 5);
}

TEST_CASE("redis shards: listen() gets a notice per setting saved or erased") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shs");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  redis_store other(sharded(prefix));  // another instance's connection
  boost::system::error_code ec;
  auto listener = store.sharded()->listen(ec);
  REQUIRE_MESSAGE(listener, ec.message());

  other.settings()->save_setting("push:mail", "v1", ec);
  REQUIRE_FALSE(ec);
  other.settings()->erase_setting("push:mail with space", ec);  // an unknown key is announced too
  REQUIRE_FALSE(ec);
  std::vector<task_notice> got;
  while (got.size() < 2) {
    auto batch = listener->wait(std::chrono::milliseconds{10'000}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE_MESSAGE(!batch.empty(), "no notice for 10 s");
    for (task_notice& n : batch) got.push_back(std::move(n));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].kind == notice_kind::setting);
  CHECK(got[0].id == "push:mail");
  CHECK(got[1].kind == notice_kind::setting);
  CHECK(got[1].id == "push:mail with space");
}

TEST_CASE("redis shards: close() from another thread wakes a wait()") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shc");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  boost::system::error_code ec;
  auto listener = store.sharded()->listen(ec);
  REQUIRE(listener);
  std::promise<void> waiting;
  std::thread closer([&] {
    waiting.get_future().wait();
    listener->close();
  });
  boost::system::error_code wait_ec;
  waiting.set_value();
  // An hour: only close() can end this in time.
  listener->wait(std::chrono::hours{1}, wait_ec);
  closer.join();
  CHECK(wait_ec == errc::not_running);
  listener->wait(std::chrono::hours{1}, wait_ec);
  CHECK(wait_ec == errc::not_running);
}

TEST_CASE("redis shards: list_due_shard reads one shard, in order, list_due merges them") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shd");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  const std::vector<task> tasks = save_spread(store, "t", 60, 7, 13);
  const auto key = due_key;
  for (std::uint32_t s : {0u, 5u}) {
    std::vector<std::pair<std::int64_t, std::string>> want, got;
    for (const task& t : tasks)
      if (shard_of(t.id, shard_count) == s) want.push_back(key(t));
    std::sort(want.begin(), want.end());
    due_cursor after;
    boost::system::error_code ec;
    for (;;) {
      std::size_t n = 0;
      store.sharded()->list_due_shard(
          s, after, INT64_MAX, 3, [&](task&& t) { ++n, got.push_back(key(t)); }, ec);
      REQUIRE_FALSE(ec);
      if (n < 3) break;
    }
    CHECK(got == want);
  }
  boost::system::error_code ec;
  due_cursor c;
  store.sharded()->list_due_shard(
      shard_count, c, INT64_MAX, 3, [](task&&) {}, ec);
  CHECK(ec == errc::shard_mismatch);

  // Merged, in pages of 4, bounded by due <= 6.
  std::vector<std::pair<std::int64_t, std::string>> want, got;
  for (const task& t : tasks)
    if (to_epoch_ms(t.due) <= 6) want.push_back(key(t));
  std::sort(want.begin(), want.end());
  due_cursor after;
  for (;;) {
    std::size_t n = 0;
    store.list_due(
        after, 6, 4, [&](task&& t) { ++n, got.push_back(key(t)); }, ec);
    REQUIRE_FALSE(ec);
    if (n < 4) break;
  }
  CHECK(got == want);
}

TEST_CASE("redis shards: list_due_shards reads several shards at once, each as list_due_shard") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shm");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  const std::vector<task> tasks = save_spread(store, "m", 90, 5, 11);
  // An undecodable record in shard 2: quarantined, counted, read past.
  const std::string bad_id = [&] {
    for (int i = 0;; ++i) {
      std::string id = "bad" + std::to_string(i);
      if (shard_of(id, shard_count) == 2) return id;
    }
  }();
  raw.run({"HSET", "{" + prefix + ":2}:tasks", bad_id, "not a record"});
  raw.run({"ZADD", "{" + prefix + ":2}:due", "3", bad_id});
  const auto key = due_key;
  const std::vector<std::uint32_t> which{0, 2, 5, 7};
  std::vector<std::vector<std::pair<std::int64_t, std::string>>> want(which.size()),
      got(which.size());
  for (std::size_t k = 0; k < which.size(); ++k) {
    for (const task& t : tasks)
      if (shard_of(t.id, shard_count) == which[k] && to_epoch_ms(t.due) <= 8)
        want[k].push_back(key(t));
    std::sort(want[k].begin(), want[k].end());
  }
  std::vector<due_cursor> after(which.size());
  std::vector<std::uint32_t> open = which;
  std::vector<std::size_t> index{0, 1, 2, 3};
  std::size_t quarantined = 0;
  while (!open.empty()) {
    std::vector<due_cursor> at;
    for (std::size_t k : index) at.push_back(after[k]);
    boost::system::error_code ec;
    const auto pages = store.sharded()->list_due_shards(
        open, at, 8, 3, [&](std::size_t i, task&& t) { got[index[i]].push_back(key(t)); }, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(pages.size() == open.size());
    std::vector<std::uint32_t> next;
    std::vector<std::size_t> next_index;
    for (std::size_t i = 0; i < open.size(); ++i) {
      after[index[i]] = at[i];
      quarantined += pages[i].quarantined;
      if (pages[i].tasks + pages[i].quarantined == 3) {
        next.push_back(open[i]);
        next_index.push_back(index[i]);
      }
    }
    open = std::move(next);
    index = std::move(next_index);
  }
  for (std::size_t k = 0; k < which.size(); ++k) CHECK(got[k] == want[k]);
  CHECK(quarantined == 1);
  CHECK(raw.integer({"HEXISTS", "{" + prefix + ":2}:tasks", bad_id}) == 0);

  boost::system::error_code ec;
  std::vector<std::uint32_t> beyond{1, shard_count};
  std::vector<due_cursor> cursors(2);
  store.sharded()->list_due_shards(
      beyond, cursors, INT64_MAX, 3, [](std::size_t, task&&) {}, ec);
  CHECK(ec == errc::shard_mismatch);
}

TEST_CASE("redis shards: list_dead merges the shards by died_at, then id") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shx");
  cleanup clean{raw, prefix};
  redis_store store(sharded(prefix));
  std::vector<dead_letter> letters;
  for (int i = 0; i < 30; ++i)
    letters.push_back(make_letter("d" + std::to_string(i), "e", 1'000 + (i * 11) % 7));
  store.dead_letters()->bury(letters);
  std::vector<std::pair<std::int64_t, std::string>> want;
  for (const dead_letter& d : letters) want.emplace_back(to_epoch_ms(d.died_at), d.task.id);
  std::sort(want.begin(), want.end());
  std::set<std::uint32_t> shards_used;
  for (const dead_letter& d : letters) shards_used.insert(shard_of(d.task.id, shard_count));
  REQUIRE(shards_used.size() > 1);
  CHECK(store.dead_letters()->count_dead() == 30);
  std::vector<std::pair<std::int64_t, std::string>> got;
  for (std::size_t offset = 0; offset < 40; offset += 7)
    for (const dead_letter& d : store.dead_letters()->list_dead(offset, 7))
      got.emplace_back(to_epoch_ms(d.died_at), d.task.id);
  CHECK(got == want);
}

// ---- moving an unsharded store to the sharded layout ----------------------

namespace {

// The URI of the test server under `prefix`.
std::string uri_of(const std::string& prefix) {
  std::string uri = redis_test_uri();
  return uri + (uri.find('?') == std::string::npos ? "?prefix=" : "&prefix=") + prefix;
}

}  // namespace

TEST_CASE("redis shards: claim_shards records a count only over an empty unsharded layout") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shc");
  cleanup clean{raw, prefix};
  const std::string meta = "{" + prefix + "}:meta";
  boost::system::error_code ec;
  std::string why;
  {
    redis_store unsharded(redis_test_options(prefix));
    unsharded.save(std::vector<task>{make_task("a"), make_task("b")});
    unsharded.dead_letters()->bury(std::vector<dead_letter>{make_letter("c")});
  }
  redis_layout l = redis_store::inspect_layout(sharded(prefix), ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(l.created);
  CHECK(l.shards == 0);
  CHECK(l.unsharded_tasks == 2);
  CHECK(l.unsharded_dead == 1);
  // Records there: the careful claim leaves the store as it is.
  l = redis_store::claim_shards(sharded(prefix), true, ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(l.shards == 0);
  CHECK_FALSE(raw.get({"HGET", meta, "shards"}).has_value());
  // The unconditional one records the count; the same count again is a no-op,
  // another one is refused.
  l = redis_store::claim_shards(sharded(prefix), false, ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(l.shards == shard_count);
  CHECK(l.unsharded_tasks == 2);
  CHECK(raw.get({"HGET", meta, "shards"}) == std::to_string(shard_count));
  l = redis_store::claim_shards(sharded(prefix, 4), false, ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(l.shards == shard_count);
  CHECK(raw.get({"HGET", meta, "shards"}) == std::to_string(shard_count));
  // The unsharded layout now opens only with ignore_shard_count.
  CHECK(redis_store::open(redis_test_options(prefix), ec) == nullptr);
  CHECK(ec == errc::shard_mismatch);
  redis_options view = redis_test_options(prefix);
  view.ignore_shard_count = true;
  auto opened = redis_store::open(view, ec, &why);
  REQUIRE_MESSAGE(opened != nullptr, why);
  CHECK(opened->dead_letters()->count_dead() == 1);
  const auto found = opened->find(std::vector<std::string>{"a"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(found[0] == make_task("a"));
  // A new prefix: the careful claim creates the meta key with the count.
  const std::string fresh = unique_prefix("shc");
  cleanup clean_fresh{raw, fresh};
  l = redis_store::claim_shards(sharded(fresh), true, ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(l.shards == shard_count);
  CHECK(l.created);
  CHECK(redis_store(sharded(fresh)).sharded()->shards() == shard_count);
  // No count is no claim.
  redis_store::claim_shards(sharded(fresh, 0), true, ec);
  CHECK(ec == errc::invalid_cluster_options);
}

TEST_CASE("redis shards: migrate_to_shards moves every task and dead letter, in batches") {
  raw_redis raw;
  const std::string prefix = unique_prefix("shm");
  cleanup clean{raw, prefix};
  const std::string tag = "{" + prefix + "}:";
  // More than one batch (1000) of each, and a setting.
  std::vector<task> tasks;
  for (int i = 0; i < 2500; ++i)
    tasks.push_back(make_task("m-" + std::to_string(i), "p" + std::to_string(i), 1'000 + i));
  std::vector<dead_letter> letters;
  for (int i = 0; i < 1200; ++i)
    letters.push_back(make_letter("d-" + std::to_string(i), "e" + std::to_string(i), 5'000 + i));
  {
    redis_store unsharded(redis_test_options(prefix));
    unsharded.save(tasks);
    unsharded.dead_letters()->bury(letters);
    boost::system::error_code setting_ec;
    unsharded.settings()->save_setting("push:mail", "http://127.0.0.1:9/", setting_ec);
    REQUIRE_FALSE(setting_ec);
  }
  SUBCASE("from the start") {}
  SUBCASE("again after a move that stopped after its copy") {
    // The state a move interrupted before its removals leaves: the count
    // recorded, everything in both layouts.
    boost::system::error_code ec;
    redis_store::claim_shards(sharded(prefix), false, ec);
    REQUIRE_FALSE(ec);
    redis_store target(sharded(prefix));
    target.save(tasks);
    target.dead_letters()->bury(letters);
  }
  boost::system::error_code ec;
  std::string why;
  const shard_migration moved = migrate_to_shards(uri_of(prefix), shard_count, ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(moved.shards == shard_count);
  CHECK(moved.tasks == tasks.size());
  CHECK(moved.dead_letters == letters.size());
  CHECK(raw.integer({"EXISTS", tag + "tasks", tag + "due", tag + "dead", tag + "dead:by_time"}) ==
        0);

  redis_store store(sharded(prefix));
  std::map<std::string, task> listed;
  store.list([&](task&& t) { listed.emplace(t.id, std::move(t)); });
  REQUIRE(listed.size() == tasks.size());
  for (const task& t : tasks) CHECK(listed[t.id] == t);
  CHECK(store.dead_letters()->count_dead() == letters.size());
  for (const dead_letter& d : {letters.front(), letters.back()})
    CHECK(store.dead_letters()->find_dead(d.task.id) == d);
  // The due index came along: the earliest task first.
  due_cursor after;
  std::vector<task> first;
  store.list_due(
      after, 1'000'000, 1, [&](task&& t) { first.push_back(std::move(t)); }, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(first.size() == 1);
  CHECK(first[0] == tasks.front());
  // The settings are the same hash in both layouts.
  const auto settings = store.settings()->load_settings(ec);
  REQUIRE_FALSE(ec);
  CHECK(std::count(settings.begin(), settings.end(),
                   std::pair<std::string, std::string>{"push:mail", "http://127.0.0.1:9/"}) == 1);

  // Done: run again, nothing moves.
  const shard_migration again = migrate_to_shards(uri_of(prefix), shard_count, ec, &why);
  REQUIRE_MESSAGE(!ec, why);
  CHECK(again.tasks == 0);
  CHECK(again.dead_letters == 0);
  // Another count is refused, naming the one the store has.
  migrate_to_shards(uri_of(prefix), 4, ec, &why);
  CHECK(ec == errc::shard_mismatch);
  CHECK_MESSAGE(why.find("sharded with 8 shards already, not 4") != std::string::npos, why);
}

}  // namespace delayq::test
