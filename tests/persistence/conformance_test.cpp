// The task_store contract (task_store.hpp), checked identically against every
// backend: memory_store, sqlite_store on a file in a fresh temp dir, and
// redis_store on the test server under a prefix of its own.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "delayq/record_codec.hpp"
#include "delayq/role_store.hpp"
#include "store_fixtures.hpp"

using namespace delayq;
using namespace delayq::test;

namespace {

std::map<std::string, task> list_all(task_store& store, list_summary* summary = nullptr) {
  std::map<std::string, task> out;
  const list_summary s = store.list([&](task&& t) {
    const std::string id = t.id;
    CHECK_MESSAGE(out.emplace(id, std::move(t)).second, "listed twice: " << id);
  });
  CHECK(s.tasks == out.size());
  if (summary) *summary = s;
  return out;
}

std::string all_bytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s;
}

// The store's dead-letter role: every store delayq ships has one.
dead_letter_store& dead_role(task_store& store) {
  dead_letter_store* const d = store.dead_letters();
  REQUIRE_MESSAGE(d != nullptr, store.describe() << " offers no dead letters");
  return *d;
}

// The error-code forms of the dead-letter calls, failing the test on error.
void bury(task_store& store, const std::vector<dead_letter>& letters) {
  boost::system::error_code ec;
  dead_role(store).bury(letters, ec);
  REQUIRE_MESSAGE(!ec, "bury: " << ec.message());
}

std::vector<dead_letter> list_dead(task_store& store, std::size_t offset, std::size_t limit) {
  boost::system::error_code ec;
  auto letters = dead_role(store).list_dead(offset, limit, ec);
  REQUIRE_MESSAGE(!ec, "list_dead: " << ec.message());
  return letters;
}

std::optional<dead_letter> find_dead(task_store& store, std::string_view id) {
  boost::system::error_code ec;
  auto letter = dead_role(store).find_dead(id, ec);
  REQUIRE_MESSAGE(!ec, "find_dead: " << ec.message());
  return letter;
}

void revive(task_store& store, const std::vector<task>& tasks) {
  boost::system::error_code ec;
  dead_role(store).revive(tasks, ec);
  REQUIRE_MESSAGE(!ec, "revive: " << ec.message());
}

void purge(task_store& store, const std::vector<std::string>& ids) {
  boost::system::error_code ec;
  dead_role(store).purge(ids, ec);
  REQUIRE_MESSAGE(!ec, "purge: " << ec.message());
}

std::size_t count_dead(task_store& store) {
  boost::system::error_code ec;
  const std::size_t n = dead_role(store).count_dead(ec);
  REQUIRE_MESSAGE(!ec, "count_dead: " << ec.message());
  return n;
}

std::vector<std::string> ids_of(const std::vector<dead_letter>& letters) {
  std::vector<std::string> ids;
  for (const dead_letter& d : letters) ids.push_back(d.task.id);
  return ids;
}

// An error with NUL, 0xFF and multi-byte UTF-8 in it.
const std::string odd_error =
    std::string("boom\0\xff after ", 12) + "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xc3\xbc";

}  // namespace

// delayq_redis_cluster_tests compiles this file again for the Redis Cluster
// fixture alone (tests/persistence/CMakeLists.txt).
#ifdef DELAYQ_CONFORMANCE_ON_CLUSTER
#define DELAYQ_STORES redis_cluster_fixture, redis_cluster_sharded_fixture
#else
#define DELAYQ_STORES                                                                     \
  memory_fixture, sqlite_fixture, redis_fixture, redis_sharded_fixture, postgres_fixture, \
      postgres_sharded_fixture
#endif

TEST_CASE_TEMPLATE("conformance: save list remove round trip", F, DELAYQ_STORES) {
  F f;
  std::vector<task> tasks{make_task("a", "first", 1'700'000'000'001, 0), make_task("b", "", 0, 7),
                          make_task("c", "third", -86'400'000, 4'000'000'000u)};
  tasks[1].type = "reminder.send";
  f.store().save(tasks);

  auto stored = list_all(f.store());
  REQUIRE(stored.size() == 3);
  for (const task& t : tasks) {
    REQUIRE(stored.count(t.id) == 1);
    CHECK(stored[t.id].type == t.type);
    CHECK(stored[t.id].payload == t.payload);
    CHECK(to_epoch_ms(stored[t.id].due) == to_epoch_ms(t.due));
    CHECK(stored[t.id].attempts == t.attempts);
    CHECK(stored[t.id] == t);
  }

  const std::vector<std::string> gone{"b"};
  f.store().remove(gone);
  stored = list_all(f.store());
  CHECK(stored.size() == 2);
  CHECK(stored.count("b") == 0);
  CHECK(stored["a"] == tasks[0]);
  CHECK(stored["c"] == tasks[2]);
}

TEST_CASE_TEMPLATE("conformance: save twice upserts", F, DELAYQ_STORES) {
  F f;
  f.store().save(std::vector{make_task("x", "old", 1000, 0)});
  const task newer = make_task("x", "new content", 2000, 5);
  f.store().save(std::vector{newer});
  const auto stored = list_all(f.store());
  REQUIRE(stored.size() == 1);
  CHECK(stored.at("x") == newer);
}

TEST_CASE_TEMPLATE("conformance: an id twice in one batch keeps the later task", F, DELAYQ_STORES) {
  F f;
  const task later = make_task("dup", "later", 2000, 1);
  f.store().save(std::vector{make_task("dup", "earlier", 1000, 0), later});
  const auto stored = list_all(f.store());
  REQUIRE(stored.size() == 1);
  CHECK(stored.at("dup") == later);
}

TEST_CASE_TEMPLATE("conformance: a batch of 10000 tasks in one save", F, DELAYQ_STORES) {
  F f;
  std::vector<task> batch;
  for (int i = 0; i < 10000; ++i)
    batch.push_back(make_task("task-" + std::to_string(i), "p" + std::to_string(i), 1'000'000 + i,
                              static_cast<std::uint32_t>(i % 5)));
  f.store().save(batch);

  list_summary summary;
  const auto stored = list_all(f.store(), &summary);
  CHECK(summary.tasks == 10000);
  CHECK(summary.quarantined == 0);
  REQUIRE(stored.size() == 10000);
  for (const task& t : batch) REQUIRE(stored.at(t.id) == t);

  std::vector<std::string> ids;
  for (const task& t : batch) ids.push_back(t.id);
  f.store().remove(ids);
  CHECK(list_all(f.store()).empty());
}

TEST_CASE_TEMPLATE("conformance: a payload over 1 MiB", F, DELAYQ_STORES) {
  F f;
  std::string payload;
  payload.reserve((1u << 20) + 3);
  while (payload.size() < (1u << 20) + 3) payload += all_bytes();
  payload.resize((1u << 20) + 3);
  const task big = make_task("big", payload);
  f.store().save(std::vector{big});
  const auto stored = list_all(f.store());
  REQUIRE(stored.size() == 1);
  CHECK(stored.at("big").payload.size() == payload.size());
  CHECK(stored.at("big") == big);
}

TEST_CASE_TEMPLATE("conformance: binary payloads keep NUL and 0xFF bytes", F, DELAYQ_STORES) {
  F f;
  const std::vector<task> tasks{make_task("nul", std::string("\0\0a\0", 4)),
                                make_task("ff", std::string(16, '\xff')),
                                make_task("every-byte", all_bytes()), make_task("empty", "")};
  f.store().save(tasks);
  const auto stored = list_all(f.store());
  REQUIRE(stored.size() == tasks.size());
  for (const task& t : tasks) CHECK(stored.at(t.id) == t);
}

TEST_CASE_TEMPLATE("conformance: ids with odd characters", F, DELAYQ_STORES) {
  F f;
  std::vector<task> tasks;
  for (std::string id :
       {"a:b:c", "{tag}", "}{", "{delayq}:tasks", "a/b/../c", "\xc3\xbcnic\xc3\xb8r",
        "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80", "not-utf8-\xc3\x28\xff"})
    tasks.push_back(make_task(id, "payload of " + id));
  f.store().save(tasks);
  const auto stored = list_all(f.store());
  REQUIRE(stored.size() == tasks.size());
  for (const task& t : tasks) CHECK(stored.at(t.id) == t);

  std::vector<std::string> ids;
  for (const task& t : tasks) ids.push_back(t.id);
  f.store().remove(ids);
  CHECK(list_all(f.store()).empty());
}

TEST_CASE_TEMPLATE("conformance: removing unknown ids and empty batches is fine", F,
                   DELAYQ_STORES) {
  F f;
  f.store().save(std::vector{make_task("kept")});
  boost::system::error_code ec;
  const std::vector<std::string> unknown{"never-saved", "also-not"};
  f.store().remove(unknown, ec);
  CHECK_FALSE(ec);
  f.store().remove(std::span<const std::string>{}, ec);
  CHECK_FALSE(ec);
  f.store().save(std::span<const task>{}, ec);
  CHECK_FALSE(ec);
  const auto stored = list_all(f.store());
  CHECK(stored.size() == 1);
  CHECK(stored.count("kept") == 1);
}

TEST_CASE_TEMPLATE("conformance: a reopened store sees the data", F, DELAYQ_STORES) {
  F f;
  if constexpr (F::persistent) {
    const std::vector<task> tasks{make_task("one", "1", 10, 1), make_task("two", "2", 20, 2)};
    f.store().save(tasks);
    const std::vector<std::string> gone{"two"};
    f.store().remove(gone);
    auto again = f.reopen();
    REQUIRE(again);
    const auto stored = list_all(*again);
    REQUIRE(stored.size() == 1);
    CHECK(stored.at("one") == tasks[0]);
    // Writes through the second object are visible through the first.
    again->save(std::vector{make_task("three")});
    CHECK(list_all(f.store()).size() == 2);
  } else {
    CHECK(f.reopen() == nullptr);  // memory: nothing to reopen, by design
  }
}

TEST_CASE_TEMPLATE("conformance: an undecodable record is quarantined not lost", F, DELAYQ_STORES) {
  F f;
  if constexpr (F::raw_access) {
    f.store().save(std::vector{make_task("good-1"), make_task("good-2")});
    const std::string garbage = std::string("\0garbage", 8) + "\xff not a record";
    f.put_raw("bad", garbage);
    // A valid record filed under another id is inconsistent too.
    f.put_raw("misfiled", encode_task(make_task("someone-else")));

    log_capture logs;
    list_summary summary;
    std::map<std::string, task> stored;
    REQUIRE_NOTHROW(stored = list_all(f.store(), &summary));
    CHECK(summary.quarantined == 2);
    CHECK(summary.tasks == 2);
    CHECK(stored.size() == 2);
    CHECK(stored.count("good-1") == 1);
    CHECK(stored.count("good-2") == 1);

    CHECK(f.quarantined_raw("bad") == garbage);
    CHECK(f.quarantined_raw("misfiled").has_value());
    CHECK_FALSE(f.exists_raw("bad"));
    CHECK(logs.contains("'bad'"));
    CHECK(logs.contains("'misfiled'"));

    // Once moved it stays out of the way, and stays in quarantine.
    const auto again = f.store().list([](task&&) {});
    CHECK(again.quarantined == 0);
    CHECK(again.tasks == 2);
    CHECK(f.quarantined_raw("bad") == garbage);
  } else {
    CHECK(f.store().list([](task&&) {}).quarantined == 0);
  }
}

TEST_CASE_TEMPLATE("conformance: the list sink may call back into the store", F, DELAYQ_STORES) {
  F f;
  std::vector<task> tasks;
  for (int i = 0; i < 2500; ++i) tasks.push_back(make_task("re-" + std::to_string(i)));
  f.store().save(tasks);
  std::size_t seen = 0;
  f.store().list([&](task&& t) {
    ++seen;
    const std::vector<std::string> ids{t.id};
    f.store().remove(ids);
  });
  CHECK(seen == tasks.size());
  CHECK(list_all(f.store()).empty());
}

TEST_CASE_TEMPLATE("conformance: an exception from the sink leaves the store usable", F,
                   DELAYQ_STORES) {
  F f;
  f.store().save(std::vector{make_task("a"), make_task("b")});
  CHECK_THROWS_AS(f.store().list([](task&&) { throw std::runtime_error("sink failed"); }),
                  std::runtime_error);
  f.store().save(std::vector{make_task("c")});
  CHECK(list_all(f.store()).size() == 3);
}

TEST_CASE_TEMPLATE("conformance: saves from two threads", F, DELAYQ_STORES) {
  F f;
  std::atomic<int> failures{0};
  auto writer = [&](const std::string& tag) {
    for (int i = 0; i < 50; ++i) {
      boost::system::error_code ec;
      f.store().save(std::vector{make_task(tag + std::to_string(i))}, ec);
      if (ec) ++failures;
    }
  };
  std::thread t1(writer, "left-"), t2(writer, "right-");
  t1.join();
  t2.join();
  CHECK(failures == 0);
  CHECK(list_all(f.store()).size() == 100);
}

TEST_CASE_TEMPLATE("conformance: describe names the backend", F, DELAYQ_STORES) {
  F f;
  const std::string name = f.store().describe();
  CHECK_FALSE(name.empty());
  CHECK((name.starts_with("memory:") || name.starts_with("sqlite:") ||
         name.starts_with("redis://") || name.starts_with("unix://") ||
         name.starts_with("redis-cluster://") || name.starts_with("postgres://")));
}

TEST_CASE_TEMPLATE(
    "conformance: the store offers dead letters, settings and sequences, shards when sharded", F,
    DELAYQ_STORES) {
  F f;
  task_store& store = f.store();
  // Each role is this very object when the store inherits it (memory), or
  // a role object of its own (SQLite, Redis, PostgreSQL: role_store):
  // either way the same object for the store's whole life.
  void* const self = dynamic_cast<void*>(&store);
  const bool built_from_roles = dynamic_cast<role_store*>(&store) != nullptr;
  CHECK(built_from_roles == !std::is_same_v<F, memory_fixture>);
  const auto same_or_role = [&](void* role) {
    return built_from_roles ? role != self : role == self;
  };
  REQUIRE(store.dead_letters() != nullptr);
  CHECK(same_or_role(dynamic_cast<void*>(store.dead_letters())));
  CHECK(store.dead_letters() == store.dead_letters());
  REQUIRE(store.settings() != nullptr);
  CHECK(same_or_role(dynamic_cast<void*>(store.settings())));
  CHECK(store.settings() == store.settings());
  REQUIRE(store.sequences() != nullptr);
  CHECK(same_or_role(dynamic_cast<void*>(store.sequences())));
  std::uint32_t shards = 0;
  if constexpr (requires { F::shards; }) shards = F::shards;
  if (shards == 0) {
    CHECK(store.sharded() == nullptr);
  } else {
    REQUIRE(store.sharded() != nullptr);
    CHECK(same_or_role(dynamic_cast<void*>(store.sharded())));
    CHECK(store.sharded()->shards() == shards);
  }
}

// ---- dead letters ---------------------------------------------------------

TEST_CASE_TEMPLATE("conformance: bury moves live tasks to the dead letters", F, DELAYQ_STORES) {
  F f;
  f.store().save(std::vector{make_task("a"), make_task("b"), make_task("c")});
  std::string long_error;
  while (long_error.size() < max_dead_letter_error) long_error += all_bytes();
  long_error.resize(max_dead_letter_error);  // the longest kept as is
  const std::vector<dead_letter> letters{make_letter("a", odd_error, 1'700'000'000'001),
                                         make_letter("c", long_error, 5),
                                         make_letter("never-live", "", -86'400'000)};
  bury(f.store(), letters);

  const auto live = list_all(f.store());
  CHECK(live.size() == 1);
  CHECK(live.count("b") == 1);
  CHECK(count_dead(f.store()) == 3);
  for (const dead_letter& d : letters) {
    const auto found = find_dead(f.store(), d.task.id);
    REQUIRE(found.has_value());
    CHECK(found->task == d.task);
    CHECK(found->error == d.error);
    CHECK(to_epoch_ms(found->died_at) == to_epoch_ms(d.died_at));
    CHECK(*found == d);
  }
  CHECK_FALSE(find_dead(f.store(), "b").has_value());
  CHECK_FALSE(find_dead(f.store(), "unknown").has_value());
  // Ordered by died_at.
  CHECK(list_dead(f.store(), 0, 10) == std::vector{letters[2], letters[1], letters[0]});

  // Empty batches are no-ops.
  boost::system::error_code ec;
  dead_role(f.store()).bury(std::span<const dead_letter>{}, ec);
  CHECK_FALSE(ec);
  dead_role(f.store()).revive(std::span<const task>{}, ec);
  CHECK_FALSE(ec);
  dead_role(f.store()).purge(std::span<const std::string>{}, ec);
  CHECK_FALSE(ec);
  CHECK(count_dead(f.store()) == 3);
}

TEST_CASE_TEMPLATE("conformance: an error over the cap is cut, never lost whole", F,
                   DELAYQ_STORES) {
  F f;
  std::string huge;
  while (huge.size() < 100'000) huge += "\xe6\x97\xa5 stack frame " + std::to_string(huge.size());
  bury(f.store(), std::vector{make_letter("huge", huge)});
  const auto found = find_dead(f.store(), "huge");
  REQUIRE(found.has_value());
  const std::string& got = found->error;
  if (got != huge) {  // memory_store keeps it; the encoded stores cap it
    const std::string_view cut = dead_letter_error_cut;
    CHECK(got.size() <= max_dead_letter_error);
    CHECK(got.size() >= max_dead_letter_error - 3);
    REQUIRE(got.ends_with(cut));
    CHECK(huge.starts_with(got.substr(0, got.size() - cut.size())));
  }
  if constexpr (F::raw_access) CHECK(got != huge);
}

TEST_CASE_TEMPLATE("conformance: bury is an upsert", F, DELAYQ_STORES) {
  F f;
  bury(f.store(), std::vector{make_letter("x", "first", 1000), make_letter("y", "", 1500)});
  const dead_letter again = make_letter("x", "second", 2000);
  bury(f.store(), std::vector{again});
  CHECK(count_dead(f.store()) == 2);
  CHECK(find_dead(f.store(), "x") == again);
  // Re-sorted by the new died_at.
  CHECK(ids_of(list_dead(f.store(), 0, 10)) == std::vector<std::string>{"y", "x"});

  // An id twice in one batch keeps the later letter.
  const dead_letter later = make_letter("dup", "later", 10);
  bury(f.store(), std::vector{make_letter("dup", "earlier", 3000), later});
  CHECK(find_dead(f.store(), "dup") == later);
  CHECK(count_dead(f.store()) == 3);
  CHECK(ids_of(list_dead(f.store(), 0, 10)) == std::vector<std::string>{"dup", "y", "x"});
}

TEST_CASE_TEMPLATE("conformance: list_dead pages by died_at, then id", F, DELAYQ_STORES) {
  F f;
  // Ties at 1000 are ordered by the id's bytes: 'Z' < 'a' < 'b' < 0xc3.
  bury(f.store(), std::vector{make_letter("b", "", 1000), make_letter("m", "", 2000),
                              make_letter("\xc3\xbc", "", 1000), make_letter("a", "", 1000),
                              make_letter("z", "", 500), make_letter("Z", "", 1000),
                              make_letter("neg", "", -5)});
  const std::vector<std::string> order{"neg", "z", "Z", "a", "b", "\xc3\xbc", "m"};
  CHECK(ids_of(list_dead(f.store(), 0, 100)) == order);

  SUBCASE("pages of every size add up to the whole") {
    for (std::size_t limit = 1; limit <= order.size() + 1; ++limit) {
      std::vector<std::string> paged;
      for (std::size_t offset = 0;; offset += limit) {
        const auto page = list_dead(f.store(), offset, limit);
        CHECK(page.size() <= limit);
        if (page.empty()) break;
        for (auto& id : ids_of(page)) paged.push_back(id);
      }
      CHECK_MESSAGE(paged == order, "limit " << limit);
    }
  }
  SUBCASE("edges") {
    CHECK(ids_of(list_dead(f.store(), 2, 3)) == std::vector<std::string>{"Z", "a", "b"});
    CHECK(ids_of(list_dead(f.store(), 6, 10)) == std::vector<std::string>{"m"});
    CHECK(list_dead(f.store(), 7, 10).empty());  // offset at the end
    CHECK(list_dead(f.store(), 1000, 10).empty());
    CHECK(list_dead(f.store(), 0, 0).empty());  // limit 0
    CHECK(list_dead(f.store(), 3, 0).empty());
    constexpr auto huge = std::numeric_limits<std::size_t>::max();
    CHECK(ids_of(list_dead(f.store(), 0, huge)) == order);
    CHECK(ids_of(list_dead(f.store(), 5, huge)) == std::vector<std::string>{"\xc3\xbc", "m"});
    CHECK(list_dead(f.store(), huge, huge).empty());
    CHECK(list_dead(f.store(), huge, 1).empty());
  }
}

TEST_CASE_TEMPLATE("conformance: revive moves a dead letter back to the live tasks", F,
                   DELAYQ_STORES) {
  F f;
  f.store().save(std::vector{make_task("live")});
  bury(f.store(), std::vector{make_letter("a", "failed", 100), make_letter("b", "failed", 200)});
  // Requeued with a fresh due time and attempt count.
  const task again = make_task("a", "new payload", 1'800'000'000'000, 0);
  revive(f.store(), std::vector{again});

  auto live = list_all(f.store());
  CHECK(live.size() == 2);
  REQUIRE(live.count("a") == 1);
  CHECK(live.at("a") == again);
  CHECK_FALSE(find_dead(f.store(), "a").has_value());
  CHECK(count_dead(f.store()) == 1);
  CHECK(ids_of(list_dead(f.store(), 0, 10)) == std::vector<std::string>{"b"});

  // Reviving an id that is not dead just saves it.
  revive(f.store(), std::vector{make_task("fresh")});
  live = list_all(f.store());
  CHECK(live.size() == 3);
  CHECK(live.count("fresh") == 1);
  CHECK(count_dead(f.store()) == 1);
}

TEST_CASE_TEMPLATE("conformance: purge deletes dead letters and ignores unknown ids", F,
                   DELAYQ_STORES) {
  F f;
  f.store().save(std::vector{make_task("p")});  // a live task of the same id stays
  bury(f.store(), std::vector{make_letter("q"), make_letter("r"), make_letter("s")});
  f.store().save(std::vector{make_task("q")});
  purge(f.store(), std::vector<std::string>{"q", "s", "never-dead", "p"});
  CHECK(count_dead(f.store()) == 1);
  CHECK(ids_of(list_dead(f.store(), 0, 10)) == std::vector<std::string>{"r"});
  CHECK_FALSE(find_dead(f.store(), "q").has_value());
  const auto live = list_all(f.store());
  CHECK(live.size() == 2);  // p and q: purge touches only dead letters
  purge(f.store(), std::vector<std::string>{"r"});
  CHECK(count_dead(f.store()) == 0);
  CHECK(list_dead(f.store(), 0, 10).empty());
}

TEST_CASE_TEMPLATE("conformance: a reopened store keeps its dead letters", F, DELAYQ_STORES) {
  F f;
  if constexpr (F::persistent) {
    const std::vector<dead_letter> letters{make_letter("d1", odd_error, 10),
                                           make_letter("d2", "two", 20)};
    bury(f.store(), letters);
    auto again = f.reopen();
    REQUIRE(again);
    CHECK(count_dead(*again) == 2);
    CHECK(list_dead(*again, 0, 10) == letters);
    CHECK(find_dead(*again, "d1") == letters[0]);
    revive(*again, std::vector{letters[1].task});
    CHECK(count_dead(f.store()) == 1);
    CHECK(list_all(f.store()).count("d2") == 1);
  } else {
    CHECK(f.reopen() == nullptr);
  }
}

TEST_CASE_TEMPLATE("conformance: an undecodable dead letter is quarantined not returned", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (F::raw_access) {
    bury(f.store(), std::vector{make_letter("g1", "", 100), make_letter("g2", "", 200),
                                make_letter("g3", "", 300)});
    const std::string garbage = std::string("\0garbage", 8) + "\xff not a record";
    f.put_raw_dead("bad", garbage, 150);
    f.put_raw_dead("misfiled", encode_dead_letter(make_letter("someone-else")), 160);
    // A live task's record (version 1) has no error or died_at.
    f.put_raw_dead("live-record", encode_task(make_task("live-record")), 170);
    f.put_raw_dead("found-bad", garbage, 400);

    log_capture logs;
    // The first page meets three bad records; once they are moved, the page
    // is read again so that neither it nor the next page skips a letter.
    CHECK(ids_of(list_dead(f.store(), 0, 2)) == std::vector<std::string>{"g1", "g2"});
    CHECK(ids_of(list_dead(f.store(), 2, 2)) == std::vector<std::string>{"g3"});
    CHECK(f.dead_quarantined_raw("bad") == garbage);
    CHECK(f.dead_quarantined_raw("misfiled").has_value());
    CHECK(f.dead_quarantined_raw("live-record").has_value());
    CHECK_FALSE(f.exists_raw_dead("bad"));
    CHECK_FALSE(f.exists_raw_dead("live-record"));
    CHECK(logs.contains("'bad'"));
    CHECK(logs.contains("'misfiled'"));

    // find_dead quarantines too, and reports no letter.
    CHECK_FALSE(find_dead(f.store(), "found-bad").has_value());
    CHECK(f.dead_quarantined_raw("found-bad") == garbage);
    CHECK_FALSE(f.exists_raw_dead("found-bad"));

    CHECK(count_dead(f.store()) == 3);
    CHECK(ids_of(list_dead(f.store(), 0, 10)) == std::vector<std::string>{"g1", "g2", "g3"});
    // The live tasks were not touched.
    CHECK(list_all(f.store()).empty());
  } else {
    CHECK(list_dead(f.store(), 0, 10).empty());
  }
}

// ---- priority and ttr ---------------------------------------------------------

TEST_CASE_TEMPLATE("conformance: a task's priority and ttr survive write and reload", F,
                   DELAYQ_STORES) {
  F f;
  task urgent = make_task("urgent", "u", 1'700'000'000'001, 2);
  urgent.priority = 4'294'967'295u;
  urgent.ttr = std::chrono::milliseconds{43'200'000};
  task counted = make_task("counted", "c", 1'700'000'000'002, 0);
  counted.priority = 1;
  counted.trigger_count = 3;
  counted.signals = 1;
  task only_ttr = make_task("only-ttr", "t", 1'700'000'000'003, 0);
  only_ttr.ttr = std::chrono::milliseconds{1000};
  const task plain = make_task("plain");
  const std::vector<task> tasks{urgent, counted, only_ttr, plain};
  f.store().save(tasks);
  dead_letter buried = make_letter("buried", "bury requested");
  buried.task.priority = 42;
  buried.task.ttr = std::chrono::milliseconds{5000};
  bury(f.store(), std::vector{buried});

  const auto check = [&](task_store& store) {
    const auto stored = list_all(store);
    REQUIRE(stored.size() == tasks.size());
    for (const task& t : tasks) {
      REQUIRE(stored.count(t.id) == 1);
      CHECK(stored.at(t.id).priority == t.priority);
      CHECK(stored.at(t.id).ttr == t.ttr);
      CHECK(stored.at(t.id) == t);
    }
    CHECK(find_dead(store, "buried") == buried);
    CHECK(list_dead(store, 0, 10) == std::vector{buried});
  };
  check(f.store());
  if constexpr (F::persistent) {
    auto again = f.reopen();
    REQUIRE(again);
    check(*again);
    // A revived dead letter keeps them too.
    revive(*again, std::vector{buried.task});
    CHECK(list_all(f.store()).at("buried") == buried.task);
  }
}

// ---- sequences -------------------------------------------------------------

namespace {

sequence_store& sequence_role(task_store& store) {
  sequence_store* const s = store.sequences();
  REQUIRE_MESSAGE(s != nullptr, store.describe() << " offers no sequences");
  return *s;
}

std::uint64_t take_numbers(task_store& store, std::string_view name, std::uint64_t count) {
  boost::system::error_code ec;
  const std::uint64_t first = sequence_role(store).allocate(name, count, ec);
  REQUIRE_MESSAGE(!ec, "allocate: " << ec.message());
  return first;
}

}  // namespace

TEST_CASE_TEMPLATE("conformance: a sequence starts at 1 and never hands a number out twice", F,
                   DELAYQ_STORES) {
  F f;
  CHECK(take_numbers(f.store(), "jobs", 10) == 1);
  CHECK(take_numbers(f.store(), "jobs", 1) == 11);
  CHECK(take_numbers(f.store(), "jobs", 1) == 12);
  // Sequences are independent by name (bytes, not text).
  CHECK(take_numbers(f.store(), "other", 1) == 1);
  CHECK(take_numbers(f.store(), std::string("jobs\0x", 6), 3) == 1);
  CHECK(take_numbers(f.store(), "jobs", 5) == 13);

  boost::system::error_code ec;
  sequence_role(f.store()).allocate("jobs", 0, ec);
  CHECK(ec == errc::invalid_options);
  sequence_role(f.store()).allocate("", 1, ec);
  CHECK(ec == errc::invalid_options);
  CHECK(take_numbers(f.store(), "jobs", 1) == 18);  // the refusals took nothing

  if constexpr (F::persistent) {
    auto again = f.reopen();
    REQUIRE(again);
    CHECK(take_numbers(*again, "jobs", 2) == 19);
    CHECK(take_numbers(f.store(), "jobs", 1) == 21);  // both objects share it
  } else {
    CHECK(f.reopen() == nullptr);
  }
}

TEST_CASE_TEMPLATE("conformance: raise_to moves a sequence up, never down", F, DELAYQ_STORES) {
  F f;
  sequence_store& seq = sequence_role(f.store());
  boost::system::error_code ec;
  seq.raise_to("fresh", 100, ec);
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "fresh", 1) == 100);
  seq.raise_to("fresh", 50, ec);  // lower than next (101): no change
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "fresh", 1) == 101);
  seq.raise_to("fresh", 102, ec);  // equal to next: no change
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "fresh", 1) == 102);
  // Past 2^53, where a double would lose the last digits.
  const std::uint64_t big = (std::uint64_t{1} << 53) + 3;
  seq.raise_to("fresh", big, ec);
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "fresh", 2) == big);
  seq.raise_to("fresh", big + 1, ec);
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "fresh", 1) == big + 2);
  seq.raise_to("fresh", 0, ec);
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "fresh", 1) == big + 3);
  seq.raise_to("untouched", 1, ec);
  REQUIRE_FALSE(ec);
  CHECK(take_numbers(f.store(), "untouched", 1) == 1);
  if constexpr (F::persistent) {
    auto again = f.reopen();
    REQUIRE(again);
    CHECK(take_numbers(*again, "fresh", 1) == big + 4);
  }
}

TEST_CASE_TEMPLATE("conformance: two threads allocating never get overlapping ranges", F,
                   DELAYQ_STORES) {
  F f;
  // Two store objects where the backend has a second one to give (another
  // connection, another SQLite handle): what two engines on one store see.
  std::unique_ptr<task_store> second = f.reopen();
  task_store& a = f.store();
  task_store& b = second ? *second : f.store();
  constexpr int rounds = 200;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> got[2];  // first, count
  std::atomic<int> errors{0};
  const auto run = [&](task_store& store, int which) {
    for (int i = 0; i < rounds; ++i) {
      const std::uint64_t count = 1 + static_cast<std::uint64_t>((i * 7 + which) % 5);
      boost::system::error_code ec;
      const std::uint64_t first = store.sequences()->allocate("shared", count, ec);
      if (ec || first == 0)
        ++errors;
      else
        got[which].emplace_back(first, count);
    }
  };
  std::thread t0(run, std::ref(a), 0);
  std::thread t1(run, std::ref(b), 1);
  t0.join();
  t1.join();
  CHECK(errors.load() == 0);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> all = got[0];
  all.insert(all.end(), got[1].begin(), got[1].end());
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == 2 * rounds);
  // Together they are 1 .. N, each number once.
  std::uint64_t next = 1;
  for (const auto& [first, count] : all) {
    CHECK_MESSAGE(first == next, "a range starting at " << first << ", expected " << next);
    next = first + count;
  }
  CHECK(take_numbers(a, "shared", 1) == next);
}
