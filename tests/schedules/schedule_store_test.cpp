// The schedule_store role on every store delayq ships (memory, SQLite, Redis
// and PostgreSQL, each of those two also in its sharded layout): revisions, compare-and-set,
// paging, bytes, and the race the keeper's claims rely on (one writer wins a revision).
#include <doctest/doctest.h>

#include <atomic>
#include <barrier>
#include <map>
#include <thread>

#include "delayq/schedule_store.hpp"
#include "delayq/shard_store.hpp"
#include "store_fixtures.hpp"

using namespace delayq;
using namespace delayq::test;

#define DELAYQ_SCHEDULE_STORES                                                            \
  memory_fixture, sqlite_fixture, redis_fixture, redis_sharded_fixture, postgres_fixture, \
      postgres_sharded_fixture

namespace {

schedule_store& role(task_store& s) {
  schedule_store* r = s.schedules();
  REQUIRE(r != nullptr);
  return *r;
}

bool write_one(schedule_store& s, schedule_write w) {
  boost::system::error_code ec;
  s.write_schedules(std::span<const schedule_write>(&w, 1), ec);
  REQUIRE_FALSE(ec);
  return w.applied;
}

schedule_write put(std::string_view id, std::string_view def, std::string_view st,
                   std::uint64_t expected) {
  schedule_write w;
  w.what = schedule_write::kind::put;
  w.id = id;
  w.definition = def;
  w.state = st;
  w.expected = expected;
  return w;
}

schedule_write state(std::string_view id, std::string_view st, std::uint64_t expected) {
  schedule_write w;
  w.what = schedule_write::kind::state;
  w.id = id;
  w.state = st;
  w.expected = expected;
  return w;
}

schedule_write erase(std::string_view id, std::uint64_t expected) {
  schedule_write w;
  w.what = schedule_write::kind::erase;
  w.id = id;
  w.expected = expected;
  return w;
}

std::optional<schedule_record> find_one(schedule_store& s, const std::string& id) {
  boost::system::error_code ec;
  const std::string ids[] = {id};
  auto r = s.find_schedules(ids, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(r.size() == 1);
  return r[0];
}

}  // namespace

TEST_CASE_TEMPLATE("schedule store: every write is a compare-and-set on the revision", F,
                   DELAYQ_SCHEDULE_STORES) {
  F f;
  schedule_store& s = role(f.store());
  CHECK_FALSE(find_one(s, "a"));
  CHECK_FALSE(write_one(s, state("a", "s0", 0)));  // nothing to change
  CHECK_FALSE(write_one(s, erase("a", 0)));
  CHECK(write_one(s, put("a", "def1", "s1", 0)));  // created
  CHECK(find_one(s, "a") == schedule_record{"a", "def1", "s1", 1});
  CHECK_FALSE(write_one(s, put("a", "def9", "s9", 0)));  // exists already
  CHECK_FALSE(write_one(s, put("a", "def9", "s9", 5)));  // wrong revision
  CHECK(write_one(s, put("a", "def2", "s2", 1)));
  CHECK_FALSE(write_one(s, state("a", "s9", 1)));  // stale
  CHECK(write_one(s, state("a", "s3", 2)));
  CHECK(find_one(s, "a") == schedule_record{"a", "def2", "s3", 3});
  CHECK_FALSE(write_one(s, erase("a", 2)));
  CHECK(write_one(s, erase("a", 3)));
  CHECK_FALSE(find_one(s, "a"));
  // A new life starts at revision 1 again.
  CHECK(write_one(s, put("a", "def", "s", 0)));
  CHECK(find_one(s, "a")->revision == 1);
}

TEST_CASE_TEMPLATE("schedule store: a batch applies each change on its own", F,
                   DELAYQ_SCHEDULE_STORES) {
  F f;
  schedule_store& s = role(f.store());
  REQUIRE(write_one(s, put("x", "d", "s", 0)));
  std::vector<schedule_write> batch{put("y", "d", "s", 0), state("x", "t", 7), state("x", "u", 1),
                                    put("z", "d", "s", 0), erase("nope", 1)};
  boost::system::error_code ec;
  s.write_schedules(batch, ec);
  REQUIRE_FALSE(ec);
  CHECK(batch[0].applied);
  CHECK_FALSE(batch[1].applied);
  CHECK(batch[2].applied);
  CHECK(batch[3].applied);
  CHECK_FALSE(batch[4].applied);
  CHECK(find_one(s, "x")->state == "u");
  CHECK(s.count_schedules(ec) == 3);
}

TEST_CASE_TEMPLATE("schedule store: bytes are kept as they are, and pages go in id order", F,
                   DELAYQ_SCHEDULE_STORES) {
  F f;
  schedule_store& s = role(f.store());
  const std::string bin("\0\xff\x01{}:", 7);
  std::vector<std::string> ids{"b", "a", "a:b", "{x}", "z/y", "\xc3\xa9t\xc3\xa9", "A", "0"};
  for (const auto& id : ids) REQUIRE(write_one(s, put(id, bin + id, "", 0)));
  std::sort(ids.begin(), ids.end());
  boost::system::error_code ec;
  std::vector<std::string> seen;
  std::string after;
  for (;;) {
    auto page = s.list_schedules(after, 3, ec);
    REQUIRE_FALSE(ec);
    for (const auto& r : page) {
      seen.push_back(r.id);
      CHECK(r.definition == bin + r.id);
      CHECK(r.state.empty());
      CHECK(r.revision == 1);
    }
    if (page.size() < 3) break;
    after = page.back().id;
  }
  CHECK(seen == ids);
  CHECK(s.count_schedules(ec) == ids.size());
  const std::vector<std::string> some{"a", "missing", "{x}"};
  auto found = s.find_schedules(some, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(found.size() == 3);
  CHECK(found[0]->id == "a");
  CHECK_FALSE(found[1]);
  CHECK(found[2]->definition == bin + "{x}");
}

// What the engine's start() reads: every schedule once, in pages no larger
// than asked, whatever the order (a sharded store reads its shards one by
// one rather than merging them).
TEST_CASE_TEMPLATE("schedule store: a scan hands over every schedule once, in pages", F,
                   DELAYQ_SCHEDULE_STORES) {
  F f;
  schedule_store& s = role(f.store());
  std::vector<std::string> ids;
  for (int i = 0; i < 150; ++i) ids.push_back("s" + std::to_string(i * 7919 % 1000));
  // A write points at its bytes: they live here until the call returns.
  std::vector<std::string> defs, states;
  for (const auto& id : ids) {
    defs.push_back("def " + id);
    states.push_back("st " + id);
  }
  std::vector<schedule_write> batch;
  for (std::size_t i = 0; i < ids.size(); ++i) batch.push_back(put(ids[i], defs[i], states[i], 0));
  boost::system::error_code ec;
  s.write_schedules(batch, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(write_one(s, state(ids[3], "later", 1)));  // revision 2
  std::map<std::string, int> seen;
  std::size_t pages = 0, largest = 0;
  s.scan_schedules(
      7,
      [&](std::vector<schedule_record>& page) {
        ++pages;
        largest = std::max(largest, page.size());
        for (const auto& r : page) {
          ++seen[r.id];
          CHECK(r.definition == "def " + r.id);
          CHECK(r.state == (r.id == ids[3] ? "later" : "st " + r.id));
          CHECK(r.revision == (r.id == ids[3] ? 2U : 1U));
        }
      },
      ec);
  REQUIRE_FALSE(ec);
  CHECK(largest <= 7);
  CHECK(pages >= ids.size() / 7);
  CHECK(seen.size() == ids.size());
  for (const auto& id : ids) CHECK_MESSAGE(seen[id] == 1, id);
  // An empty store: no page at all.
  for (const auto& id : ids) REQUIRE(write_one(s, erase(id, id == ids[3] ? 2 : 1)));
  pages = 0;
  s.scan_schedules(
      7, [&](std::vector<schedule_record>&) { ++pages; }, ec);
  REQUIRE_FALSE(ec);
  CHECK(pages == 0);
}

TEST_CASE_TEMPLATE("schedule store: schedules survive reopening", F, DELAYQ_SCHEDULE_STORES) {
  F f;
  if constexpr (!F::persistent) return;
  REQUIRE(write_one(role(f.store()), put("kept", "def", "st", 0)));
  auto again = f.reopen();
  CHECK(find_one(role(*again), "kept") == schedule_record{"kept", "def", "st", 1});
}

TEST_CASE_TEMPLATE("schedule store: of writers racing for one revision exactly one wins", F,
                   DELAYQ_SCHEDULE_STORES) {
  // What makes a claim of the keeper happen once: several keepers (threads
  // here, each with a store object of its own where the store allows it)
  // write the state of one schedule expecting the revision they all read.
  F f;
  schedule_store& s = role(f.store());
  REQUIRE(write_one(s, put("race", "d", "0", 0)));
  constexpr int writers = 6;
  constexpr int rounds = 30;
  std::vector<std::unique_ptr<task_store>> own;
  for (int w = 0; w < writers; ++w) own.push_back(F::persistent ? f.reopen() : nullptr);
  std::atomic<int> wins[rounds] = {};
  std::barrier sync(writers);
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w)
    threads.emplace_back([&, w] {
      schedule_store& mine = own[w] ? *own[w]->schedules() : s;
      for (int r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();  // everyone has the same revision in mind: r + 1
        const std::string st = std::to_string(w);
        schedule_write one = state("race", st, static_cast<std::uint64_t>(r) + 1);
        boost::system::error_code ec;
        mine.write_schedules(std::span<const schedule_write>(&one, 1), ec);
        if (!ec && one.applied) ++wins[r];
        sync.arrive_and_wait();  // the round is over before the next starts
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < rounds; ++r) CHECK_MESSAGE(wins[r].load() == 1, "round " << r);
  CHECK(find_one(s, "race")->revision == rounds + 1);
}

TEST_CASE_TEMPLATE("schedule store: insert_absent stores a task once and announces it", F,
                   redis_sharded_fixture, postgres_sharded_fixture) {
  F f;
  task_store& store = f.store();
  boost::system::error_code ec;
  auto listener = store.sharded()->listen(ec);
  REQUIRE_FALSE(ec);
  task t;
  t.id = "sched@1767225600000";
  t.type = "report";
  t.payload = "first";
  t.due = from_epoch_ms(1767225600000);
  role(store).insert_absent(std::span<const task>(&t, 1), ec);
  REQUIRE_FALSE(ec);
  // Wait for the notice of the stored task.
  bool noticed = false;
  for (int i = 0; i < 50 && !noticed; ++i)
    for (const task_notice& n : listener->wait(std::chrono::milliseconds(100), ec))
      noticed = noticed || (n.kind == notice_kind::task && n.id == t.id &&
                            n.due_ms == 1767225600000 && n.shard == shard_of(t.id, 8));
  CHECK(noticed);
  // Present already: left as it is (another instance may hold and change it).
  task other = t;
  other.payload = "second";
  role(store).insert_absent(std::span<const task>(&other, 1), ec);
  REQUIRE_FALSE(ec);
  const std::string ids[] = {t.id};
  auto found = store.find(ids, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(found[0]);
  CHECK(found[0]->payload == "first");
}

TEST_CASE("schedule store: stores that keep no shards have no insert_absent") {
  memory_fixture m;
  sqlite_fixture q;
  task t;
  t.id = "s@1";
  t.type = "x";
  boost::system::error_code ec;
  role(m.store()).insert_absent(std::span<const task>(&t, 1), ec);
  CHECK(ec == errc::unsupported);
  role(q.store()).insert_absent(std::span<const task>(&t, 1), ec);
  CHECK(ec == errc::unsupported);
}
