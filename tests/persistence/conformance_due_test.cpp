// The horizon's reads of the task_store contract, list_due() and find()
// (task_store.hpp), checked identically against every store that has them:
// sqlite_store and redis_store (single server here; a Redis Cluster in
// delayq_redis_cluster_tests). memory_store holds everything in process and
// answers errc::unsupported, which is checked too.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cluster_router.hpp"
#include "delayq/record_codec.hpp"
#include "store_fixtures.hpp"

using namespace delayq;
using namespace delayq::test;

namespace {

// (due_ms, id) with ids compared bytewise: the order list_due() reads in.
// std::string's operator< compares as unsigned char (char_traits<char>::lt).
struct due_key {
  std::int64_t due_ms;
  std::string id;
  bool operator<(const due_key& o) const { return std::tie(due_ms, id) < std::tie(o.due_ms, o.id); }
  bool operator==(const due_key& o) const = default;
};

std::ostream& operator<<(std::ostream& os, const due_key& k) {
  return os << "(" << k.due_ms << ", '" << k.id << "')";
}

due_key key_of(const task& t) { return {to_epoch_ms(t.due), t.id}; }

// One list_due() page; fails the test on error.
std::vector<task> page(task_store& store, due_cursor& after, std::int64_t until_ms,
                       std::size_t limit, list_summary* summary = nullptr) {
  std::vector<task> out;
  boost::system::error_code ec;
  const list_summary s = store.list_due(
      after, until_ms, limit, [&](task&& t) { out.push_back(std::move(t)); }, ec);
  REQUIRE_MESSAGE(!ec, "list_due: " << ec.message());
  CHECK(s.tasks == out.size());
  if (summary) *summary = s;
  return out;
}

// Pages until a page reads fewer than `limit` records; checks each page
// before that one is full and that the cursor is the last key read.
std::vector<due_key> drain(task_store& store, due_cursor& after, std::int64_t until_ms,
                           std::size_t limit, std::size_t* pages = nullptr) {
  std::vector<due_key> out;
  std::size_t n = 0;
  for (;;) {
    list_summary s;
    const auto got = page(store, after, until_ms, limit, &s);
    ++n;
    REQUIRE(n < 100'000);
    for (const task& t : got) out.push_back(key_of(t));
    if (!got.empty() && s.quarantined == 0) CHECK(due_key{after.due_ms, after.id} == out.back());
    if (s.tasks + s.quarantined < limit) break;
  }
  if (pages) *pages = n;
  return out;
}

std::vector<due_key> sorted_keys(const std::vector<task>& tasks, std::int64_t until_ms) {
  std::vector<due_key> out;
  for (const task& t : tasks)
    if (to_epoch_ms(t.due) <= until_ms) out.push_back(key_of(t));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::optional<task>> find(task_store& store, const std::vector<std::string>& ids) {
  boost::system::error_code ec;
  auto found = store.find(ids, ec);
  REQUIRE_MESSAGE(!ec, "find: " << ec.message());
  return found;
}

template <class F>
constexpr bool in_process = std::is_same_v<F, memory_fixture>;

constexpr std::int64_t no_end = std::numeric_limits<std::int64_t>::max();

}  // namespace

#ifdef DELAYQ_CONFORMANCE_ON_CLUSTER
#define DELAYQ_STORES redis_cluster_fixture, redis_cluster_sharded_fixture
#else
#define DELAYQ_STORES                                                                     \
  memory_fixture, sqlite_fixture, redis_fixture, redis_sharded_fixture, postgres_fixture, \
      postgres_sharded_fixture
#endif

TEST_CASE_TEMPLATE("conformance: list_due and find on an empty store", F, DELAYQ_STORES) {
  F f;
  boost::system::error_code ec;
  due_cursor after;
  bool called = false;
  const list_summary s = f.store().list_due(
      after, no_end, 10, [&](task&&) { called = true; }, ec);
  const std::vector<std::string> ids{"nobody"};
  const auto found = f.store().find(ids, ec);
  if constexpr (in_process<F>) {
    CHECK(ec == errc::unsupported);
  } else {
    CHECK_FALSE(ec);
    CHECK(s.tasks == 0);
    CHECK(s.quarantined == 0);
    CHECK_FALSE(called);
    CHECK(after.due_ms == std::numeric_limits<std::int64_t>::min());
    CHECK(after.id.empty());
    REQUIRE(found.size() == 1);
    CHECK_FALSE(found[0].has_value());
    // An empty span needs no round trip and gives an empty vector.
    CHECK(f.store().find(std::span<const std::string>{}, ec).empty());
    CHECK_FALSE(ec);
  }
}

TEST_CASE_TEMPLATE("conformance: list_due pages in due then id order", F, DELAYQ_STORES) {
  F f;
  if constexpr (!in_process<F>) {
    // Due times from a small set (many ties), ids of varied lengths and bytes
    // where bytewise order differs from a locale's ("\xc3\xa9" after "z",
    // "B" before "a", a prefix before its extensions).
    std::vector<task> tasks;
    const char* stems[] = {"a", "B", "z", "\xc3\xa9", "ab", "a-"};
    for (int i = 0; i < 1200; ++i) {
      const std::int64_t due = 1'700'000'000'000 + (i * 7919 % 23) * 1000 - 11'000;
      tasks.push_back(make_task(std::string(stems[i % 6]) + std::to_string(i), "p", due));
    }
    tasks.push_back(make_task("neg", "p", -5'000));
    f.store().save(tasks);

    due_cursor after;
    std::size_t pages = 0;
    CHECK(drain(f.store(), after, no_end, 37, &pages) == sorted_keys(tasks, no_end));
    CHECK(pages == tasks.size() / 37 + 1);

    // A drained cursor reads nothing more, and stays put.
    const due_cursor end = after;
    CHECK(page(f.store(), after, no_end, 37).empty());
    CHECK(after.due_ms == end.due_ms);
    CHECK(after.id == end.id);

    // until_ms is inclusive: tasks due exactly then are read, not later ones.
    const std::int64_t until = 1'700'000'000'000;
    due_cursor bounded;
    const auto upto = drain(f.store(), bounded, until, 50);
    CHECK(upto == sorted_keys(tasks, until));
    CHECK(upto.back().due_ms == until);
    due_cursor before;
    CHECK(drain(f.store(), before, until - 1, 50) == sorted_keys(tasks, until - 1));

    // Read from the middle: a cursor made by hand, between two ids.
    due_cursor mid{until, "a"};
    std::vector<due_key> want;
    for (const due_key& k : sorted_keys(tasks, no_end))
      if (due_key{until, "a"} < k) want.push_back(k);
    CHECK(drain(f.store(), mid, no_end, 1000) == want);
  } else {
    due_cursor after;
    boost::system::error_code ec;
    f.store().list_due(
        after, no_end, 10, [](task&&) {}, ec);
    CHECK(ec == errc::unsupported);
  }
}

TEST_CASE_TEMPLATE("conformance: list_due pages through long runs of one due time", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (!in_process<F>) {
    std::vector<task> tasks;
    for (int i = 0; i < 2500; ++i)
      tasks.push_back(make_task("run-" + std::to_string(i), "", 1'000 + (i % 3) * 1'000));
    f.store().save(tasks);
    due_cursor after;
    std::size_t pages = 0;
    const auto got = drain(f.store(), after, no_end, 100, &pages);
    CHECK(got.size() == 2500);
    CHECK(got == sorted_keys(tasks, no_end));
    CHECK(pages == 26);  // 25 full pages, then an empty one says the range is done
  }
}

TEST_CASE_TEMPLATE("conformance: list_due goes on after the cursor's task is removed", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (!in_process<F>) {
    // Due 10: r0..r9; due 20: s0..s2; due 30: t0; due 40: two ids with NULs.
    std::vector<task> tasks;
    for (int i = 0; i < 10; ++i) tasks.push_back(make_task("r" + std::to_string(i), "", 10));
    for (int i = 0; i < 3; ++i) tasks.push_back(make_task("s" + std::to_string(i), "", 20));
    tasks.push_back(make_task("t0", "", 30));
    // Ids that differ only after a NUL byte: a comparison through strcmp()
    // or strcoll() (Lua's string `<` in Redis) takes them for equal.
    tasks.push_back(make_task(std::string("n\0a", 3), "", 40));
    tasks.push_back(make_task(std::string("n\0c", 3), "", 40));
    f.store().save(tasks);
    const auto all = sorted_keys(tasks, no_end);
    const auto rest_after = [&](const due_key& k) {
      std::vector<due_key> out;
      for (const due_key& a : all)
        if (k < a) out.push_back(a);
      return out;
    };

    SUBCASE("inside a run of equal due times") {
      due_cursor after;
      const auto first = page(f.store(), after, no_end, 4);
      REQUIRE(first.size() == 4);
      CHECK(after.id == "r3");
      f.store().remove(std::vector<std::string>{"r3"});
      CHECK(drain(f.store(), after, no_end, 4) == rest_after({10, "r3"}));
    }
    SUBCASE("at the end of a run") {
      due_cursor after;
      const auto first = page(f.store(), after, no_end, 10);
      CHECK(after.id == "r9");
      f.store().remove(std::vector<std::string>{"r9"});
      CHECK(drain(f.store(), after, no_end, 2) == rest_after({10, "r9"}));
    }
    SUBCASE("the cursor's task is saved again with another due time") {
      due_cursor after;
      page(f.store(), after, no_end, 5);
      CHECK(after.id == "r4");
      f.store().save(std::vector{make_task("r4", "", 25)});
      // r4 now sorts after the cursor: it is read again, at its new place.
      std::vector<due_key> want = rest_after({10, "r4"});
      want.insert(std::find(want.begin(), want.end(), due_key{30, "t0"}), due_key{25, "r4"});
      CHECK(drain(f.store(), after, no_end, 3) == want);
    }
    SUBCASE("a cursor made by hand for an id never stored") {
      due_cursor after{20, "s0a"};
      CHECK(drain(f.store(), after, no_end, 1) == rest_after({20, "s0a"}));
      due_cursor nul{40, std::string("n\0b", 3)};
      CHECK(drain(f.store(), nul, no_end, 1) == std::vector<due_key>{{40, std::string("n\0c", 3)}});
      due_cursor before_all{10, ""};
      CHECK(drain(f.store(), before_all, no_end, 5) == all);
    }
  }
}

TEST_CASE_TEMPLATE("conformance: list_due quarantines an undecodable record and reads past it", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (F::raw_access) {
    // put_raw() files its records at due time 0. In order:
    // (-5, a) (0, a!) (0, bad) (0, c) (0, misfiled) (5, z)
    f.store().save(std::vector{make_task("a", "", -5), make_task("a!", "", 0),
                               make_task("c", "", 0), make_task("z", "", 5)});
    const std::string garbage = std::string("\0garbage", 8) + "\xff not a record";
    f.put_raw("bad", garbage);
    f.put_raw("misfiled", encode_task(make_task("someone-else")));

    log_capture logs;
    due_cursor after;
    list_summary s;
    // A page that ends on a bad record: the cursor moves past it.
    auto got = page(f.store(), after, no_end, 3, &s);
    REQUIRE(got.size() == 2);
    CHECK(key_of(got[0]) == due_key{-5, "a"});
    CHECK(key_of(got[1]) == due_key{0, "a!"});
    CHECK(s.quarantined == 1);
    CHECK(after.due_ms == 0);
    CHECK(after.id == "bad");
    CHECK(f.quarantined_raw("bad") == garbage);
    CHECK_FALSE(f.exists_raw("bad"));
    CHECK(logs.contains("'bad'"));

    got = page(f.store(), after, no_end, 3, &s);
    REQUIRE(got.size() == 2);
    CHECK(key_of(got[0]) == due_key{0, "c"});
    CHECK(key_of(got[1]) == due_key{5, "z"});
    CHECK(s.quarantined == 1);  // 2 + 1 == limit: not done yet
    CHECK(after.id == "z");
    CHECK(f.quarantined_raw("misfiled").has_value());
    CHECK(logs.contains("'misfiled'"));

    got = page(f.store(), after, no_end, 3, &s);
    CHECK(got.empty());
    CHECK(s.quarantined == 0);

    // Moved once, for good: a fresh scan meets only the good tasks.
    due_cursor again;
    CHECK(drain(f.store(), again, no_end, 10) ==
          std::vector<due_key>{{-5, "a"}, {0, "a!"}, {0, "c"}, {5, "z"}});
  }
}

TEST_CASE_TEMPLATE("conformance: find returns tasks by id, in the order asked", F, DELAYQ_STORES) {
  F f;
  if constexpr (!in_process<F>) {
    const task one = make_task("one", "first", 100);
    const task two = make_task("two", std::string("\0\xff", 2), 200);
    f.store().save(std::vector{one, two});
    const auto found = find(f.store(), {"two", "absent", "one", "two", ""});
    REQUIRE(found.size() == 5);
    CHECK(found[0] == std::optional<task>(two));
    CHECK_FALSE(found[1].has_value());
    CHECK(found[2] == std::optional<task>(one));
    CHECK(found[3] == std::optional<task>(two));
    CHECK_FALSE(found[4].has_value());

    if constexpr (F::raw_access) {
      const std::string garbage = std::string("\0garbage", 8) + "\xff not a record";
      f.put_raw("bad", garbage);
      f.put_raw("misfiled", encode_task(make_task("someone-else")));
      log_capture logs;
      const auto mixed = find(f.store(), {"bad", "one", "misfiled", "bad"});
      REQUIRE(mixed.size() == 4);
      CHECK_FALSE(mixed[0].has_value());
      CHECK(mixed[1] == std::optional<task>(one));
      CHECK_FALSE(mixed[2].has_value());
      CHECK_FALSE(mixed[3].has_value());
      CHECK(f.quarantined_raw("bad") == garbage);
      CHECK(f.quarantined_raw("misfiled").has_value());
      CHECK_FALSE(f.exists_raw("bad"));
      CHECK_FALSE(f.exists_raw("misfiled"));
      CHECK(logs.contains("'bad'"));
      // Gone from the live tasks: list() no longer meets them.
      CHECK(f.store().list([](task&&) {}).quarantined == 0);
    }
  } else {
    boost::system::error_code ec;
    f.store().find(std::vector<std::string>{"x"}, ec);
    CHECK(ec == errc::unsupported);
  }
}

TEST_CASE_TEMPLATE("conformance: the list_due sink may call back into the store", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (!in_process<F>) {
    std::vector<task> tasks;
    for (int i = 0; i < 20; ++i) tasks.push_back(make_task("cb" + std::to_string(i), "", i));
    f.store().save(tasks);
    due_cursor after;
    std::size_t seen = 0;
    boost::system::error_code ec;
    f.store().list_due(
        after, no_end, 100,
        [&](task&& t) {
          ++seen;
          const auto found = find(f.store(), {t.id});
          CHECK(found.at(0).has_value());
          f.store().remove(std::vector<std::string>{t.id});
        },
        ec);
    CHECK_FALSE(ec);
    CHECK(seen == 20);
    due_cursor again;
    CHECK(page(f.store(), again, no_end, 100).empty());
  }
}

// A member of {P}:due without a record in {P}:tasks (left by hand: the
// store's scripts always write both) is read past, not counted, so a page
// still holds `limit` tasks when there are more.
TEST_CASE_TEMPLATE("conformance: list_due reads past an index entry without a record", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (requires(F & x) { x.raw_; }) {
    f.store().save(
        std::vector{make_task("a", "", 1), make_task("b", "", 1), make_task("c", "", 2)});
    f.raw_.run({"ZADD", f.key("due", "ab-ghost"), "1", "ab-ghost"});
    due_cursor after;
    list_summary s;
    auto got = page(f.store(), after, no_end, 2, &s);
    REQUIRE(got.size() == 2);
    CHECK(got[0].id == "a");
    CHECK(got[1].id == "b");
    CHECK(after.id == "b");
    got = page(f.store(), after, no_end, 2, &s);
    REQUIRE(got.size() == 1);
    CHECK(got[0].id == "c");
    // Ending on one: the cursor is past it.
    f.raw_.run({"ZADD", f.key("due", "zz-ghost"), "3", "zz-ghost"});
    due_cursor tail{2, "c"};
    CHECK(page(f.store(), tail, no_end, 5).empty());
    CHECK(tail.due_ms == 3);
    CHECK(tail.id == "zz-ghost");
  }
}

// SCRIPT FLUSH where the store's keys live.
template <class Raw>
void flush_scripts(Raw& raw, const std::string& key) {
  if constexpr (requires { raw.run_at(0u, std::vector<std::string>{}); })
    raw.run_at(detail::redis::key_slot(key), {"SCRIPT", "FLUSH"});
  else
    raw.run({"SCRIPT", "FLUSH"});
}

TEST_CASE_TEMPLATE("conformance: list_due survives a flushed script cache (NOSCRIPT)", F,
                   DELAYQ_STORES) {
  F f;
  if constexpr (requires(F & x) { x.raw_; }) {
    f.store().save(std::vector{make_task("a", "", 1), make_task("b", "", 2)});
    due_cursor after;
    CHECK(page(f.store(), after, no_end, 1).size() == 1);
    flush_scripts(f.raw_, f.key("due"));
    log_capture logs;
    const auto got = page(f.store(), after, no_end, 10);
    REQUIRE(got.size() == 1);
    CHECK(got[0].id == "b");
    // Another test's store connecting meanwhile (ctest -j) loads the script
    // again, so NOSCRIPT is likely, not certain; the outcome above holds
    // either way.
    WARN(logs.contains("NOSCRIPT"));
  }
}
