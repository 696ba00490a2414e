// The task_store contract (task_store.hpp), checked identically against every
// backend: memory_store, sqlite_store on a file in a fresh temp dir, and
// redis_store on the test server under a prefix of its own.
#include <atomic>
#include <map>
#include <stdexcept>
#include <thread>

#include "delayq/detail/record_codec.hpp"
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

}  // namespace

#define DELAYQ_STORES memory_fixture, sqlite_fixture, redis_fixture

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

TEST_CASE_TEMPLATE("conformance: an id twice in one batch keeps the later task", F,
                   DELAYQ_STORES) {
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
    f.put_raw("misfiled", detail::encode_record(make_task("someone-else")));

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
         name.starts_with("redis://") || name.starts_with("unix://")));
}
