// Stores that live in the process (task_store::in_process(), memory_store):
// the engine takes their live tasks at start() and keeps them in its wheel
// only, writing nothing for schedule, cancel or firing; dead letters still go
// to the store. And every store, in process or not, agrees with the engine
// when threads race on the same ids.

#include <doctest/doctest.h>

#include <atomic>
#include <delayq/delayq.hpp>
#include <mutex>
#include <thread>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// A memory store that says it is in process and counts the live writes the
// engine makes to it (there should be none after start()).
class counting_in_process_store final : public borrowed_store {
 public:
  explicit counting_in_process_store(delayq::task_store& inner) : borrowed_store(inner) {}
  using task_store::write;
  bool in_process() const noexcept override { return true; }
  void write(std::span<const delayq::store_change> changes,
             boost::system::error_code& ec) override {
    for (const auto& c : changes)
      if (c.what == delayq::change_kind::save || c.what == delayq::change_kind::remove)
        ++live_writes;
    borrowed_store::write(changes, ec);
  }
  std::atomic<int> live_writes{0};
};

// Runs threads that schedule, replace, reschedule and cancel, on ids of their
// own and on ids they share, until they are done.
void race(delayq::engine& eng, int& errors) {
  constexpr int threads = 4, per_thread = 200, shared_ids = 8;
  std::vector<std::thread> users;
  std::atomic<int> failed{0};
  for (int k = 0; k < threads; ++k)
    users.emplace_back([&, k] {
      for (int i = 0; i < per_thread; ++i) {
        boost::system::error_code ec;
        // Ids of its own: schedule, and cancel every other one.
        const std::string own = "own-" + std::to_string(k) + "-" + std::to_string(i);
        eng.schedule("t", "", 1h, {own}, ec);
        if (ec) ++failed;
        if (i % 2 == 0 && !eng.cancel(own, ec)) ++failed;
        // Ids every thread races on: replace, reschedule, cancel.
        const std::string shared = "shared-" + std::to_string(i % shared_ids);
        delayq::schedule_options replace{shared, delayq::on_conflict::replace};
        eng.schedule("t", std::to_string(k), 1h + std::chrono::minutes(i), replace, ec);
        if (ec) ++failed;
        if (i % 3 == 0) eng.reschedule(shared, clock_type::now() + 2h, ec);
        if (i % 5 == 0) eng.cancel(shared, ec);
        if (ec) ++failed;
      }
    });
  for (auto& u : users) u.join();
  errors = failed;
  for (int k = 0; k < threads; ++k)
    for (int i = 0; i < per_thread; ++i)
      CHECK(eng.find("own-" + std::to_string(k) + "-" + std::to_string(i)).has_value() ==
            (i % 2 == 1));
}

}  // namespace

TEST_CASE("store: the memory store is in process and the default is not") {
  delayq::memory_store mem;
  CHECK(mem.in_process());
  borrowed_store wrapped(mem);  // does not override in_process()
  CHECK_FALSE(wrapped.in_process());
}

TEST_CASE("engine: an in-process store is taken over at start and gets no live writes") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  f.add("dies", [](const delayq::task&) { throw std::runtime_error("no"); });
  delayq::memory_store mem;
  mem.save(std::vector<delayq::task>{{"held", "t", "before", clock_type::now() + 1h, 2}});
  auto owned = std::make_unique<counting_in_process_store>(mem);
  counting_in_process_store& store = *owned;
  auto opts = fast_options();
  opts.retry.max_attempts = 1;
  delayq::engine eng(io.io, f, std::move(owned), opts);
  eng.start();
  CHECK(eng.stats().loaded == 1);
  CHECK(stored(mem).empty());  // taken: the wheel holds it now
  const auto held = eng.find("held");
  REQUIRE(held.has_value());
  CHECK(held->payload == "before");
  CHECK(held->attempts == 2);
  const int after_start = store.live_writes;

  eng.schedule("t", "x", 1h, {"a"});
  eng.reschedule("a", clock_type::now() + 2h);
  eng.cancel("a");
  eng.schedule("t", "runs", 0ms, {"b"});
  REQUIRE(rec.wait_for_count(1));
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(store.live_writes == after_start);  // nothing written for any of it
  CHECK(stored(mem).empty());

  // Dead letters do go to the store, and a requeue takes the letter out
  // without leaving a live copy behind.
  eng.schedule("dies", "", 0ms, {"d"});
  REQUIRE(eventually([&] { return eng.stats().died == 1; }));
  REQUIRE(eng.dead_letters().size() == 1);
  CHECK(eng.requeue("d", clock_type::now() + 1h));
  CHECK(eng.dead_letters().empty());
  CHECK(stored(mem).empty());
  CHECK(eng.find("d").has_value());
  CHECK(eng.stop());
}

TEST_CASE("engine: threads racing on shared ids leave an in-process store's engine consistent") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  int errors = 0;
  race(eng, errors);
  CHECK(errors == 0);
  std::size_t found = 0;
  for (int i = 0; i < 8; ++i) found += eng.find("shared-" + std::to_string(i)).has_value();
  CHECK(eng.pending() == 4 * 100 + found);
  CHECK(eng.stop());
}

TEST_CASE("engine: threads racing on shared ids leave a durable store agreeing with the engine") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store mem;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(mem), fast_options());
  eng.start();
  int errors = 0;
  race(eng, errors);
  CHECK(errors == 0);
  // Every write the calls made is durable by the time they returned; the
  // store holds exactly what the engine holds, with the same content.
  const auto in_store = stored(mem);
  CHECK(in_store.size() == eng.pending());
  for (const auto& [id, t] : in_store) {
    const auto held = eng.find(id);
    REQUIRE(held.has_value());
    CHECK(*held == t);
  }
  CHECK(eng.stop());
}

TEST_CASE("engine: tasks due at the same instant run in the order they were scheduled") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  auto opts = fast_options();
  opts.workers = 1;  // attempts start in order; one worker also runs them in it
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  // Many ids, so they land in different shards of the engine.
  const auto due = clock_type::now() + 100ms;
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i)
    ids.push_back(eng.schedule_at("t", "", due, {"same-instant-" + std::to_string(i)}));
  REQUIRE(rec.wait_for_count(ids.size()));
  CHECK(rec.ids() == ids);
}

// A lone schedule on an in-process store with no horizon takes a shorter
// path (engine_core::schedule_one_checked: decided and armed in one hold of
// its table's lock), and a batch's new tasks settle in place
// (settle_schedule_locked). They must keep every promise of the general
// path: the pending and per-type counts exact under threads, conflicts, the
// counters, and the task run.
TEST_CASE("engine: a lone schedule on an in-process store keeps its caps, counts and conflicts") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("free", std::ref(rec));
  f.add("capped", [](const delayq::task&) {});
  auto opts = fast_options();
  opts.type_capacity["capped"] = 100;
  opts.max_pending = 1000;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  boost::system::error_code ec;

  // Four threads race for the capped type's 100 places: exactly 100 win.
  std::atomic<int> taken{0}, refused{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        boost::system::error_code e;
        const auto id =
            eng.schedule("capped", "", 1h, {"c" + std::to_string(t) + "-" + std::to_string(i)}, e);
        if (!e && !id.empty())
          ++taken;
        else if (e == delayq::errc::type_full && id.empty())
          ++refused;
      }
    });
  for (auto& th : pool) th.join();
  CHECK(taken.load() == 100);
  CHECK(refused.load() == 140);
  CHECK(eng.pending() == 100);

  // Conflicts on a held id: reject, keep, replace.
  CHECK(eng.schedule("free", "first", 1h, {"x"}) == "x");
  CHECK(eng.schedule("free", "second", 1h, {"x"}, ec).empty());
  CHECK(ec == delayq::errc::duplicate_id);
  CHECK(eng.schedule("free", "kept?", 1h, {"x", delayq::on_conflict::keep}) == "x");
  CHECK(eng.find("x")->payload == "first");
  CHECK(eng.schedule("free", "third", 1h, {"x", delayq::on_conflict::replace}) == "x");
  CHECK(eng.find("x")->payload == "third");

  // A generated id is returned and held.
  const std::string gen = eng.schedule("free", "g", 1h);
  CHECK_FALSE(gen.empty());
  CHECK(eng.find(gen)->payload == "g");

  // The engine-wide cap: 100 capped + x + gen held, so 898 more fit.
  for (int i = 0; i < 898; ++i) eng.schedule("free", "", 1h, {"f" + std::to_string(i)});
  CHECK(eng.schedule("free", "", 1h, {"one-too-many"}, ec).empty());
  CHECK(ec == delayq::errc::queue_full);
  CHECK(eng.pending() == 1000);

  // Counted: 100 capped, x twice (its replace counts), gen, the 898.
  const auto st = eng.stats();
  CHECK(st.scheduled == 100 + 2 + 1 + 898);
  for (const auto& t : eng.metrics().types) {
    if (t.type == "capped") CHECK(t.pending == 100);
    if (t.type == "free") CHECK(t.pending == 900);  // x, gen and the 898
  }

  // A task scheduled this way runs (due later than "at once", so it is filed
  // in the wheel).
  CHECK(eng.cancel("f0"));
  CHECK(eng.schedule("free", "runs", 200ms, {"runner"}) == "runner");
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.snapshot().front().t.id == "runner");
  CHECK(rec.snapshot().front().t.payload == "runs");

  // A batch settles its tasks in place too: one due later, one due at once
  // (handed to the workers), both counted.
  for (const char* id : {"f1", "f2", "f3"}) CHECK(eng.cancel(id));
  const auto now = clock_type::now();
  CHECK(eng.schedule_many({delayq::task_spec{"free", "later", now + 1h, {"b-later"}},
                           delayq::task_spec{"free", "now", now, {"b-now"}}})
            .size() == 2);
  REQUIRE(rec.wait_for_count(2));
  CHECK(rec.snapshot()[1].t.id == "b-now");
  CHECK(eng.find("b-later")->payload == "later");
  CHECK(eng.stats().scheduled == st.scheduled + 1 + 2);

  CHECK(eng.stop());
  CHECK(eng.schedule("free", "", 1h, {"late"}, ec).empty());
  CHECK(ec == delayq::errc::not_running);
}
