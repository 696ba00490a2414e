// engine::metrics() and delayq/prometheus.hpp: per-type counters and gauges,
// histograms, the store's write metrics, and the Prometheus text rendered
// from them, parsed line by line by a strict parser (tests/support).

#include <doctest/doctest.h>

#include <delayq/delayq.hpp>
#include <delayq/prometheus.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/prometheus_text.hpp"
#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

using labels = std::map<std::string, std::string>;

// Parses `text`, failing the test on every error the parser found and on
// names that break delayq's conventions.
prom::exposition parse_checked(const std::string& text) {
  prom::exposition e = prom::parse(text);
  INFO("text:\n", text.substr(0, 8000));
  for (const std::string& err : e.errors) FAIL_CHECK(err);
  for (const auto& [name, f] : e.families) {
    INFO("family ", name);
    CHECK(name.starts_with("delayq_"));
    CHECK(f.has_help);
    if (f.type == "counter") CHECK(name.ends_with("_total"));
    if (name.find("seconds") != std::string::npos) CHECK(name.ends_with("_seconds"));
  }
  return e;
}

double get(const prom::exposition& e, const std::string& name, const labels& l = {}) {
  const auto v = e.value(name, l);
  if (!v) FAIL_CHECK("no series ", name, " with the labels asked for");
  return v.value_or(-1);
}

const delayq::type_metrics* find_type(const delayq::engine_metrics& m, const std::string& type) {
  for (const auto& t : m.types)
    if (t.type == type) return &t;
  return nullptr;
}

}  // namespace

TEST_CASE("metrics: per-type counts and histograms of an engine on a real store") {
  temp_dir dir;
  std::vector<std::string> uris = {"sqlite:" + dir.file("metrics.db"), fresh_redis_uri("metrics")};
  for (const std::string& uri : uris) {
    SUBCASE(uri.substr(0, uri.find(':')).c_str()) {
      recorder ran;
      delayq::executor_factory f;
      f.add("m.ok", std::ref(ran));
      f.add("m.bad", [](const delayq::task&) { throw std::runtime_error("no"); });
      f.add("m.idle", [](const delayq::task&) {});
      auto opts = fast_options();
      opts.retry_per_type["m.bad"] = delayq::retry_policy{2, 5ms, 5ms};
      io_thread io;
      delayq::engine eng(io.io, f, delayq::open_store(uri), opts);
      eng.start();

      for (int i = 0; i < 3; ++i) eng.schedule("m.ok", "p", 0ms);
      const std::string later = eng.schedule("m.ok", "p", 1h);
      const std::string gone = eng.schedule("m.ok", "p", 1h);
      CHECK(eng.cancel(gone));
      eng.schedule("m.bad", "p", 0ms);
      REQUIRE(ran.wait_for_count(3));
      REQUIRE(eventually([&] {
        const auto s = eng.stats();
        return s.succeeded == 3 && s.died == 1 && s.running == 0;
      }));
      // Every change goes through one write each: 5 + 1 saves, 3 removals, a
      // cancel, a retry's save and a bury; batches may group them. The last
      // may still be in flight when the counts above are reached.
      REQUIRE(eventually([&] { return eng.metrics().store.write_batch_size.sum >= 12; }));

      const delayq::engine_metrics m = eng.metrics();
      const auto* ok = find_type(m, "m.ok");
      const auto* bad = find_type(m, "m.bad");
      const auto* idle = find_type(m, "m.idle");
      REQUIRE(ok);
      REQUIRE(bad);
      REQUIRE(idle);  // registered, never used: its series are there, at 0
      CHECK(ok->scheduled == 5);
      CHECK(ok->fired == 3);
      CHECK(ok->succeeded == 3);
      CHECK(ok->cancelled == 1);
      CHECK(ok->pending == 1);
      CHECK(ok->failed == 0);
      CHECK(bad->scheduled == 1);
      CHECK(bad->fired == 2);
      CHECK(bad->failed == 2);
      CHECK(bad->retried == 1);
      CHECK(bad->died == 1);
      CHECK(bad->pending == 0);
      CHECK(idle->scheduled == 0);
      CHECK(ok->lateness_seconds.count == 3);
      CHECK(ok->execution_seconds.count == 3);
      CHECK(bad->execution_seconds.count == 2);
      CHECK(m.dead == 1);
      CHECK(m.store.write_errors == 0);
      CHECK_FALSE(m.store.outage);
      CHECK(m.store.write_seconds.count >= 1);
      CHECK(m.store.write_batch_size.count == m.store.write_seconds.count);
      CHECK(m.store.write_batch_size.sum == 12);

      const auto e = parse_checked(delayq::prometheus_text(eng));
      CHECK(get(e, "delayq_tasks_scheduled_total", {{"type", "m.ok"}}) == 5);
      CHECK(get(e, "delayq_tasks_cancelled_total", {{"type", "m.ok"}}) == 1);
      CHECK(get(e, "delayq_tasks_succeeded_total", {{"type", "m.ok"}}) == 3);
      CHECK(get(e, "delayq_tasks_fired_total", {{"type", "m.bad"}}) == 2);
      CHECK(get(e, "delayq_tasks_failed_total", {{"type", "m.bad"}}) == 2);
      CHECK(get(e, "delayq_tasks_retried_total", {{"type", "m.bad"}}) == 1);
      CHECK(get(e, "delayq_tasks_died_total", {{"type", "m.bad"}}) == 1);
      CHECK(get(e, "delayq_tasks_pending", {{"type", "m.ok"}}) == 1);
      CHECK(get(e, "delayq_tasks_pending", {{"type", "m.idle"}}) == 0);
      CHECK(get(e, "delayq_tasks_running", {{"type", "m.ok"}}) == 0);
      CHECK(get(e, "delayq_task_lateness_seconds_count", {{"type", "m.ok"}}) == 3);
      CHECK(get(e, "delayq_task_lateness_seconds_bucket", {{"type", "m.ok"}, {"le", "+Inf"}}) == 3);
      CHECK(get(e, "delayq_task_execution_seconds_count", {{"type", "m.bad"}}) == 2);
      CHECK(get(e, "delayq_dead_letters") == 1);
      CHECK(get(e, "delayq_store_write_errors_total") == 0);
      CHECK(get(e, "delayq_store_outage") == 0);
      CHECK(get(e, "delayq_store_write_seconds_count") >= 1);
      CHECK(get(e, "delayq_store_write_batch_size_sum") == 12);
      CHECK(eng.cancel(later));
      CHECK(eng.stop());
    }
  }
}

TEST_CASE("metrics: running and ready per type while a per-type limit holds tasks back") {
  latch gate;
  delayq::executor_factory f;
  f.add("m.slow", [&](const delayq::task&) { gate.enter_and_wait(); });
  auto opts = fast_options();
  opts.type_concurrency["m.slow"] = 1;
  temp_dir dir;
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store("sqlite:" + dir.file("gauges.db")), opts);
  eng.start();
  eng.schedule("m.slow", "a", 0ms);
  eng.schedule("m.slow", "b", 0ms);
  REQUIRE(gate.wait_entered(1));
  REQUIRE(eventually([&] { return eng.stats().ready == 1; }));
  auto m = eng.metrics();
  const auto* slow = find_type(m, "m.slow");
  REQUIRE(slow);
  CHECK(slow->running == 1);
  CHECK(slow->ready == 1);
  CHECK(slow->pending == 2);
  const auto e = parse_checked(delayq::prometheus_text(eng));
  CHECK(get(e, "delayq_tasks_running", {{"type", "m.slow"}}) == 1);
  CHECK(get(e, "delayq_tasks_ready", {{"type", "m.slow"}}) == 1);
  gate.release();
  REQUIRE(eventually([&] { return eng.stats().succeeded == 2; }));
  m = eng.metrics();
  slow = find_type(m, "m.slow");
  CHECK(slow->running == 0);
  CHECK(slow->ready == 0);
  CHECK(eng.stop());
}

TEST_CASE("metrics: store write errors and the outage gauge follow the store") {
  delayq::memory_store backing;
  auto owned = std::make_unique<controlled_store>(backing);
  controlled_store& store = *owned;
  recorder ran;
  delayq::executor_factory f;
  f.add("m.t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  eng.schedule("m.t", "p", 1h);
  CHECK_FALSE(eng.metrics().store.outage);

  // Down: a schedule fails, and a success's removal is kept for retry.
  store.down = true;
  boost::system::error_code ec;
  eng.schedule("m.t", "p", 0ms, {}, ec);
  CHECK(ec == delayq::errc::store_unavailable);
  auto m = eng.metrics();
  CHECK(m.store.write_errors >= 1);
  CHECK(m.store.outage);
  auto e = parse_checked(delayq::prometheus_text(eng));
  CHECK(get(e, "delayq_store_outage") == 1);
  CHECK(get(e, "delayq_store_write_errors_total") >= 1);

  // Up again: the next write lands and the gauge drops.
  store.down = false;
  eng.schedule("m.t", "p", 0ms);
  REQUIRE(ran.wait_for_count(1));
  REQUIRE(eventually([&] {
    const auto s = eng.metrics().store;
    return !s.outage && s.writes_kept == 0;
  }));
  e = parse_checked(delayq::prometheus_text(eng));
  CHECK(get(e, "delayq_store_outage") == 0);
  CHECK(eng.stop());
}

TEST_CASE("prometheus: label values are escaped, and the text parses") {
  delayq::engine_metrics m;
  delayq::type_metrics t;
  t.type = "a\"b\\c\nd";  // not a valid engine type today, but the format must hold
  t.scheduled = 7;
  t.lateness_seconds.upper_bounds = {0.001, 1};
  t.lateness_seconds.counts = {1, 2, 3};
  t.lateness_seconds.count = 3;
  t.lateness_seconds.sum = 2.5;
  m.types.push_back(t);
  std::string out;
  delayq::write_prometheus(m, out);
  CHECK(out.find("delayq_tasks_scheduled_total{type=\"a\\\"b\\\\c\\nd\"} 7\n") !=
        std::string::npos);
  CHECK(
      out.find("delayq_task_lateness_seconds_bucket{type=\"a\\\"b\\\\c\\nd\",le=\"0.001\"} 1\n") !=
      std::string::npos);
  const auto e = parse_checked(out);
  CHECK(get(e, "delayq_tasks_scheduled_total", {{"type", t.type}}) == 7);
  CHECK(get(e, "delayq_task_lateness_seconds_bucket", {{"type", t.type}, {"le", "+Inf"}}) == 3);
  CHECK(get(e, "delayq_task_lateness_seconds_sum", {{"type", t.type}}) == 2.5);

  // And the parser does reject what a broken renderer would write.
  CHECK_FALSE(prom::parse("# TYPE x counter\nx{type=\"a\"b\"} 1\n").errors.empty());
  CHECK_FALSE(prom::parse("x 1\n").errors.empty());  // no TYPE
  CHECK_FALSE(prom::parse("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                          "h_sum 1\nh_count 1\n")
                  .errors.empty());  // not cumulative
  CHECK_FALSE(prom::parse("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
                          "h_sum 1\nh_count 3\n")
                  .errors.empty());  // +Inf differs from _count
  CHECK(prom::parse("# HELP g a \\\\ help\n# TYPE g gauge\ng{a=\"x\",b=\"\\n\"} NaN\n"
                    "g{a=\"y\"} +Inf 123\n")
            .errors.empty());
}
