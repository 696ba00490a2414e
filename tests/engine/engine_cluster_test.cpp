// Clusters (engine_options::cluster): several engines on one store hold every
// shard once between them, run each task once, on its shard's owner, and
// answer calls on an id only where its shard is held. Real Redis (the tasks
// and the shard leases).
//
// Until the Redis store is sharded itself (branch `sharded`), the store here
// is `sharded_view`: a real redis_store with the cluster part of the
// interface added in the test (shards(), the real Redis lease table,
// list_due_shard() as list_due() filtered by shard_of(), and the notices of
// saved tasks passed between the engines of the process by `notice_bus`, as
// the sharded store's pub/sub would). It does not fence writes.
#include <utility>  // before Boost.Asio (Boost 1.74 + C++20)

#include <doctest/doctest.h>

#include <delayq/delayq.hpp>
#include <delayq/redis_shard_leases.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

constexpr std::uint32_t test_shards = 16;

class bus_listener;

// Carries the notices of saved tasks between the stores of one process.
struct notice_bus {
  std::mutex m;
  std::set<bus_listener*> listeners;
  void publish(const std::vector<delayq::task_notice>& notices);
};

class bus_listener final : public delayq::task_listener {
 public:
  explicit bus_listener(notice_bus& bus) : bus_(bus) {
    std::lock_guard lock(bus_.m);
    bus_.listeners.insert(this);
  }
  ~bus_listener() override {
    std::lock_guard lock(bus_.m);
    bus_.listeners.erase(this);
  }
  std::vector<delayq::task_notice> wait(std::chrono::milliseconds timeout,
                                        boost::system::error_code& ec) override {
    ec = {};
    std::unique_lock lock(m_);
    cv_.wait_for(lock, timeout, [&] { return closed_ || !queue_.empty(); });
    if (closed_) {
      ec = delayq::errc::not_running;
      return {};
    }
    std::vector<delayq::task_notice> out(queue_.begin(), queue_.end());
    queue_.clear();
    return out;
  }
  void close() noexcept override {
    std::lock_guard lock(m_);
    closed_ = true;
    cv_.notify_all();
  }
  void deliver(const std::vector<delayq::task_notice>& notices) {
    std::lock_guard lock(m_);
    queue_.insert(queue_.end(), notices.begin(), notices.end());
    cv_.notify_all();
  }

 private:
  notice_bus& bus_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<delayq::task_notice> queue_;
  bool closed_ = false;
};

void notice_bus::publish(const std::vector<delayq::task_notice>& notices) {
  if (notices.empty()) return;
  std::lock_guard lock(m);
  for (bus_listener* l : listeners) l->deliver(notices);
}

class sharded_view final : public delayq::task_store {
 public:
  sharded_view(std::string uri, notice_bus& bus)
      : uri_(std::move(uri)), inner_(delayq::open_store(uri_)), bus_(bus) {}

  std::uint32_t shards() const noexcept override { return test_shards; }
  std::unique_ptr<delayq::shard_leases> make_shard_leases(const delayq::cluster_options& c,
                                                          boost::system::error_code& ec) override {
    return delayq::make_redis_shard_leases(delayq::redis_options::parse(uri_), c, ec);
  }
  std::unique_ptr<delayq::task_listener> listen(boost::system::error_code& ec) override {
    ec = {};
    return std::make_unique<bus_listener>(bus_);
  }
  delayq::list_summary list_due_shard(std::uint32_t shard, delayq::due_cursor& after,
                                      std::int64_t until_ms, std::size_t limit,
                                      const std::function<void(delayq::task&&)>& sink,
                                      boost::system::error_code& ec) override {
    delayq::list_summary out;
    for (;;) {
      std::size_t read = 0;
      const delayq::list_summary page = inner_->list_due(
          after, until_ms, 1000,
          [&](delayq::task&& t) {
            ++read;
            if (out.tasks >= limit || delayq::shard_of(t.id, test_shards) != shard) return;
            ++out.tasks;
            sink(std::move(t));
          },
          ec);
      // The inner cursor moved past every record read; stop at a page end
      // once the shard's limit is reached (its next call goes on from there).
      if (ec || page.tasks + page.quarantined < 1000 || out.tasks >= limit) return out;
      (void)read;
    }
  }

  void write(std::span<const delayq::store_change> changes,
             boost::system::error_code& ec) override {
    auto notices = notices_of(changes);
    if (refuse_fenced) {
      // As a sharded store whose leases moved on: a shard's part holding a
      // fenced change is refused whole, the others land, lease_lost.
      std::set<std::uint32_t> refused_shards;
      for (const auto& c : changes)
        if (c.fence != 0) refused_shards.insert(delayq::shard_of(c.task->id, test_shards));
      if (!refused_shards.empty()) {
        std::vector<delayq::store_change> rest;
        for (const auto& c : changes)
          if (!refused_shards.count(delayq::shard_of(c.task->id, test_shards))) rest.push_back(c);
        refused += static_cast<int>(changes.size() - rest.size());
        inner_->write(rest, ec);
        if (!ec) bus_.publish(notices_of(rest));
        if (!ec) ec = delayq::errc::lease_lost;
        return;
      }
    }
    inner_->write(changes, ec);
    if (!ec) bus_.publish(notices);
  }
  void async_write(std::span<const delayq::store_change> changes,
                   std::function<void(boost::system::error_code)> done) override {
    if (refuse_fenced) {
      boost::system::error_code ec;
      write(changes, ec);
      return done(ec);
    }
    auto notices = notices_of(changes);
    inner_->async_write(changes, [this, notices = std::move(notices),
                                  done = std::move(done)](boost::system::error_code ec) {
      if (!ec) bus_.publish(notices);
      done(ec);
    });
  }
  std::size_t max_writes_in_flight() const noexcept override {
    return inner_->max_writes_in_flight();
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
    return inner_->find(ids, ec);
  }
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override {
    inner_->quarantine(id, reason, ec);
  }
  std::vector<delayq::dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                             boost::system::error_code& ec) override {
    return inner_->list_dead(offset, limit, ec);
  }
  std::optional<delayq::dead_letter> find_dead(std::string_view id,
                                               boost::system::error_code& ec) override {
    return inner_->find_dead(id, ec);
  }
  std::size_t count_dead(boost::system::error_code& ec) override { return inner_->count_dead(ec); }
  std::string describe() const override { return "sharded-view:" + inner_->describe(); }

  /// Refuse fenced changes (lease_lost), as when every lease moved on.
  std::atomic<bool> refuse_fenced{false};
  std::atomic<int> refused{0};  // changes refused so far

 private:
  static std::vector<delayq::task_notice> notices_of(std::span<const delayq::store_change> cs) {
    std::vector<delayq::task_notice> out;
    for (const delayq::store_change& c : cs)
      if (c.what == delayq::change_kind::save || c.what == delayq::change_kind::revive)
        out.push_back(
            {delayq::shard_of(c.task->id, test_shards),
             std::chrono::duration_cast<std::chrono::milliseconds>(c.task->due.time_since_epoch())
                 .count(),
             c.task->id});
    return out;
  }

  const std::string uri_;
  std::unique_ptr<delayq::task_store> inner_;
  notice_bus& bus_;
};

// One instance: an engine whose executor of type "t" records its runs.
struct member {
  std::string name;
  recorder ran;
  std::unique_ptr<delayq::engine> eng;
};

delayq::engine_options member_options(const std::string& name) {
  auto o = fast_options();
  o.cluster = delayq::cluster_options{test_shards, std::chrono::milliseconds{600}, name};
  return o;
}

sharded_view& start_member(member& m, io_thread& io, const std::string& uri, notice_bus& bus,
                           delayq::executor_factory f = {}) {
  f.add("t", std::ref(m.ran));
  auto store = std::make_unique<sharded_view>(uri, bus);
  sharded_view& view = *store;
  m.eng = std::make_unique<delayq::engine>(io.io, f, std::move(store), member_options(m.name));
  m.eng->start();
  return view;
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

TEST_CASE("cluster: engines hold every shard once between them; only the owner answers on an id") {
  const std::string uri = fresh_redis_uri("cluster-hold");
  notice_bus bus;
  io_thread io;
  member a{"a"}, b{"b"}, c{"c"};
  start_member(a, io, uri, bus);
  CHECK(a.eng->stats().shards_held == test_shards);  // alone: start() won them all
  start_member(b, io, uri, bus);
  std::vector<member*> ms{&a, &b};
  SUBCASE("three") {
    start_member(c, io, uri, bus);
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
  const std::string uri = fresh_redis_uri("cluster-run");
  notice_bus bus;
  io_thread io;
  member a{"a"}, b{"b"}, c{"c"};
  start_member(a, io, uri, bus);
  start_member(b, io, uri, bus);
  start_member(c, io, uri, bus);
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
  const std::string uri = fresh_redis_uri("cluster-move");
  notice_bus bus;
  io_thread io;
  member a{"a"}, b{"b"};
  start_member(a, io, uri, bus);
  // Alone, a holds every shard: far tasks through it are all held there.
  constexpr std::size_t n = 200;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i)
    ids.push_back(a.eng->schedule("t", "p", std::chrono::hours{1}));
  CHECK(a.eng->pending() == n);

  // b joins: a lets go of the shards it gives away, b reads them in.
  start_member(b, io, uri, bus);
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
  const std::string uri = fresh_redis_uri("cluster-fence");
  notice_bus bus;
  io_thread io;
  member a{"a"};
  latch gate;
  std::atomic<bool> fail{false};
  delayq::executor_factory f;
  f.add("blocked", [&](const delayq::task&) {
    gate.enter_and_wait();
    if (fail) throw std::runtime_error("fails");
  });
  sharded_view& view = start_member(a, io, uri, bus, f);
  auto reader = delayq::open_store(uri);
  SUBCASE("the removal after a success") {}
  SUBCASE("the retry's save after a failure") { fail = true; }
  a.eng->schedule("blocked", "p", std::chrono::milliseconds{0}, {"x"});
  REQUIRE(gate.wait_entered(1));
  view.refuse_fenced = true;  // the shard's lease moved on while x ran
  gate.release();
  REQUIRE(eventually([&] { return view.refused.load() >= 1; }));
  // Unfenced writes still land (a schedule, here into the same shard).
  a.eng->schedule("t", "p", std::chrono::hours{1}, {"x2"});
  CHECK(stored(*reader).count("x2") == 1);
  // The refused outcome is not kept for retry, and the task is not held
  // here any more: the store keeps it as it was, for the shard's owner.
  CHECK(eventually([&] { return a.eng->stats().writes_kept == 0 && a.eng->pending() == 1; }));
  CHECK(a.eng->stats().writes_kept == 0);
  const auto left = stored(*reader);
  REQUIRE(left.count("x") == 1);
  CHECK(left.at("x").attempts == 0);
  CHECK(a.eng->stop(patience));
}
