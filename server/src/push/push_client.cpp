#include "push/push_client.hpp"

#include <utility>

#include <atomic>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "delayq/log.hpp"
#include "delayq/shard_leases.hpp"
#include "http/connection_pool.hpp"
#include "push/push_policy.hpp"
#include "wire/dump_json.hpp"
#include "wire/http_url.hpp"
#include "wire/task_json.hpp"

namespace delayq::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using strand_type = asio::strand<asio::any_io_executor>;
using clock_type = std::chrono::steady_clock;

#ifndef DELAYQ_VERSION
#define DELAYQ_VERSION "unknown"
#endif
constexpr char user_agent[] = "delayq-server/" DELAYQ_VERSION;

using connection = pooled_connection;

// A delivery not yet started.
struct pending_delivery {
  std::string type;
  push_target target;
  delayq::task task;
  push_client::completion done;
  std::uint64_t seq = 0;  // set by deliver(): the order deliveries came in
};

// What withdraw() asked of one task id: its deliveries numbered below
// `before` are not to be written, but for those of the version spared.
struct withdrawal {
  std::uint64_t before = 0;
  bool spare = false;
  std::string type;
  std::string payload;
  std::int64_t due_ms = 0;

  bool covers(const pending_delivery& d) const {
    if (d.seq >= before) return false;
    return !(spare && d.task.type == type && d.task.payload == payload &&
             delayq::to_epoch_ms(d.task.due) == due_ms);
  }
};

}  // namespace

struct push_client::impl : std::enable_shared_from_this<push_client::impl> {
  struct request;

  struct type_state {
    std::size_t in_flight = 0;
    std::size_t limit = 1;
    std::deque<pending_delivery> queue;
  };

  impl(asio::any_io_executor e, push_client_options o) : ex(std::move(e)), options(std::move(o)) {}

  void deliver(pending_delivery p);
  void start(pending_delivery p);
  // A delivery accepted by deliver() has ended (done, dropped, withdrawn).
  void ended_locked(const std::string& id);
  // Takes the queued deliveries for which `pred` is true out of their
  // queues into `out` (whose completions the caller destroys outside the
  // lock), as ended. Returns how many.
  template <class Pred>
  std::size_t drop_queued_locked(Pred&& pred, std::vector<pending_delivery>& out) {
    const std::size_t before = out.size();
    for (auto& [type, st] : types) {
      for (auto it = st.queue.begin(); it != st.queue.end();) {
        if (pred(*it)) {
          ended_locked(it->task.id);
          out.push_back(std::move(*it));
          it = st.queue.erase(it);
          --queued;
        } else {
          ++it;
        }
      }
    }
    return out.size() - before;
  }
  // Whether withdraw() asked that `d` not be written. Takes the lock.
  bool withdrawn_since(const pending_delivery& d) const;
  // `withdrawn`: the delivery ends unsent and `done` is destroyed uncalled.
  void complete(request& r, std::string result, bool withdrawn = false);
  void drain();
  void stop();

  const asio::any_io_executor ex;
  const push_client_options options;
  connection_pool idle{options.max_idle_per_host, options.idle_timeout};

  // Read without the lock by requests deciding whether to go on; written
  // under it, so complete() sees a consistent answer with the queues.
  std::atomic<bool> stopped_flag{false};
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> withdrawn{0};

  mutable std::mutex mutex;
  bool stopped = false;
  bool draining = false;  // no request starts; those in flight go on
  std::map<std::string, type_state, std::less<>> types;
  std::size_t in_flight = 0;
  std::size_t queued = 0;
  std::uint64_t next_id = 0;
  std::map<std::uint64_t, std::weak_ptr<request>> live;
  std::uint64_t next_seq = 0;
  // Per task id, the deliveries accepted and not ended yet, and what
  // withdraw() asked of them: kept only while some are outstanding.
  std::map<std::string, std::size_t, std::less<>> outstanding;
  std::map<std::string, withdrawal, std::less<>> withdrawals;
  // withdrawals.size(), read without the lock: a send() with nothing
  // withdrawn (nearly every one) takes no lock to learn it.
  std::atomic<std::size_t> withdrawals_held{0};
};

// One delivery in flight. Everything it does runs on its strand.
struct push_client::impl::request : std::enable_shared_from_this<request> {
  request(std::shared_ptr<impl> o, std::uint64_t i, pending_delivery p, strand_type s,
          std::unique_ptr<connection> c)
      : owner(std::move(o)),
        id(i),
        delivery(std::move(p)),
        strand(std::move(s)),
        conn(std::move(c)),
        reused(conn != nullptr),
        resolver(asio::any_io_executor{strand}),
        timer(asio::any_io_executor{strand}) {}

  void run() {
    if (owner->stopped_flag) return finish({});
    if (!url) return finish(fail(url_error));
    deadline = clock_type::now() + delivery.target.timeout;
    build_request();
    if (conn) return send();
    resolve();
  }

  void build_request() {
    req.method(http::verb::post);
    req.target(url->target);
    req.version(11);
    req.set(http::field::host, url->host_header());
    req.set(http::field::user_agent, user_agent);
    req.set(http::field::content_type, "application/json");
    req.set("X-Delayq-Task-Id", delivery.task.id);
    req.set("X-Delayq-Attempt", std::to_string(std::uint64_t{delivery.task.attempts} + 1));
    if (!owner->options.instance.empty()) req.set("X-Delayq-Instance", owner->options.instance);
    if (owner->options.shards != 0 && delivery.task.fence != 0) {
      req.set("X-Delayq-Shard",
              std::to_string(delayq::shard_of(delivery.task.id, owner->options.shards)));
      req.set("X-Delayq-Fence", std::to_string(delivery.task.fence));
    }
    req.keep_alive(true);
    req.body() = dump_json(task_json(delivery.task));
    req.prepare_payload();
  }

  // tcp_stream's expiry covers connect, write and read; resolving is not a
  // stream operation, so a timer of our own bounds it against the same
  // deadline.
  void resolve() {
    conn = std::make_unique<connection>(strand);
    resolve_timed_out = false;
    timer.expires_at(deadline);
    timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      self->resolve_timed_out = true;
      self->resolver.cancel();
    });
    resolver.async_resolve(
        url->host, url->port,
        [self = shared_from_this()](boost::system::error_code ec, tcp::resolver::results_type r) {
          self->timer.cancel();
          if (self->owner->stopped_flag) return self->finish({});
          if (self->resolve_timed_out) return self->finish(self->timed_out());
          if (ec)
            return self->finish(self->fail("resolve " + self->url->host + ": " + ec.message()));
          // Checked where the address is known, at every connect: a name a
          // policy allows may resolve anywhere, and a stored target may
          // predate the policy (docs/server.md, "Security").
          std::vector<tcp::endpoint> allowed;
          std::string why;
          for (const auto& e : r) {
            const auto& policy = self->owner->options.policy;
            std::string refused;
            if (!policy || policy->allows(self->url->host, e.endpoint().port(),
                                          e.endpoint().address(), refused))
              allowed.push_back(e.endpoint());
            else if (why.empty())
              why = std::move(refused);
          }
          if (allowed.empty()) return self->finish(self->fail(why));
          self->connect(allowed);
        });
  }

  void connect(const std::vector<tcp::endpoint>& endpoints) {
    conn->stream.expires_at(deadline);
    conn->stream.async_connect(
        endpoints, [self = shared_from_this()](boost::system::error_code ec, tcp::endpoint) {
          if (self->owner->stopped_flag) return self->finish({});
          if (ec == beast::error::timeout) return self->finish(self->timed_out());
          if (ec) return self->finish(self->fail("connect: " + ec.message()));
          self->send();
        });
  }

  void send() {
    // Asked here, as late as can be: the delivery may have waited for a
    // slot, a strand, a resolve or a connect since its attempt started, and
    // meanwhile its shard's lease may have lapsed, or its task been
    // replaced (withdraw()).
    const auto& current = owner->options.attempt_current;
    if ((current && !current(delivery.task)) || owner->withdrawn_since(delivery)) return withdraw();
    // Until an answer comes, a close withdraws what the target has not
    // received: it would arrive after the push was counted failed and the
    // task retried, replaced or taken over.
    conn->reset_on_close(true);
    conn->stream.expires_at(deadline);
    http::async_write(conn->stream, req,
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (self->owner->stopped_flag) return self->finish({});
                        if (ec == beast::error::timeout) return self->finish(self->timed_out());
                        if (ec && self->reused && connection_pool::peer_closed(ec))
                          return self->retry();
                        if (ec) return self->finish(self->fail("write: " + ec.message()));
                        self->read();
                      });
  }

  // The header first: Boost 1.74's parser does not apply body_limit to a
  // Content-Length it has just read (only to chunks and bodies that run to
  // the end of the connection), so that case is checked here.
  void read() {
    parser.emplace();
    parser->body_limit(owner->options.max_response_body);
    http::async_read_header(
        conn->stream, conn->buffer, *parser,
        [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
          if (!ec) {
            const auto length = self->parser->content_length();
            if (length && *length > self->owner->options.max_response_body) {
              ec = http::error::body_limit;
            }
          }
          if (ec || self->parser->is_done()) return self->on_read(ec);
          http::async_read(
              self->conn->stream, self->conn->buffer, *self->parser,
              [self](boost::system::error_code ec2, std::size_t) { self->on_read(ec2); });
        });
  }

  void on_read(boost::system::error_code ec) {
    if (owner->stopped_flag) return finish({});
    if (ec == beast::error::timeout) return finish(timed_out());
    if (ec && reused && !parser->got_some() && conn->buffer.size() == 0 &&
        connection_pool::peer_closed(ec)) {
      return retry();
    }
    bool reusable = !ec;
    if (ec == http::error::body_limit && parser->is_header_done()) {
      // The answer is known from its status line; the rest of a body we
      // will not read makes the connection useless, not the push a failure.
      ec = {};
    }
    if (ec == http::error::end_of_stream) {
      return finish(fail("read: connection closed before a response"));
    }
    if (ec) return finish(fail("read: " + ec.message()));
    const auto& res = parser->get();
    reusable = reusable && res.keep_alive() && conn->buffer.size() == 0;
    const unsigned status = res.result_int();
    if (reusable) {
      owner->idle.put(url->host + ":" + url->port, std::move(conn));
    } else {
      conn->reset_on_close(false);  // a whole exchange: finish() closes it gently
    }
    if (status >= 200 && status < 300) return finish({});
    finish(fail("HTTP " + std::to_string(status)));
  }

  // Once only, and only on a connection from the pool: a fresh one failing
  // the same way is the target's doing.
  void retry() {
    reused = false;
    boost::system::error_code ignored;
    conn->stream.socket().close(ignored);
    conn.reset();
    resolve();
  }

  // Posted by stop(): ends whatever is pending; the handlers then see
  // stopped_flag and drop the completion.
  void cancel() {
    resolver.cancel();
    timer.cancel();
    if (conn) conn->stream.close();
  }

  std::string fail(const std::string& what) const {
    return "push to " + delivery.target.url + ": " + what;
  }
  std::string timed_out() const {
    return fail("timed out after " + std::to_string(delivery.target.timeout.count()) + " ms");
  }

  // Nothing was written on `conn`: a connection that was fine stays so.
  void withdraw() {
    if (finished) return;
    finished = true;
    if (conn && conn->stream.socket().is_open())
      owner->idle.put(url->host + ":" + url->port, std::move(conn));
    owner->complete(*this, {}, true);
  }

  void finish(std::string result) {
    if (finished) return;
    finished = true;
    if (conn) {
      boost::system::error_code ignored;
      conn->stream.socket().close(ignored);
    }
    owner->complete(*this, std::move(result));
  }

  const std::shared_ptr<impl> owner;
  const std::uint64_t id;
  pending_delivery delivery;
  const strand_type strand;
  std::optional<http_url> url;
  std::string url_error;
  std::unique_ptr<connection> conn;
  bool reused;
  bool finished = false;
  bool resolve_timed_out = false;
  clock_type::time_point deadline{};
  tcp::resolver resolver;
  asio::steady_timer timer;
  http::request<http::string_body> req;
  std::optional<http::response_parser<http::string_body>> parser;
};

void push_client::impl::deliver(pending_delivery p) {
  std::optional<pending_delivery> to_start;
  {
    std::unique_lock lock{mutex};
    if (!stopped && !draining) {
      p.seq = next_seq++;
      ++outstanding[p.task.id];
      auto& st = types[p.type];
      st.limit = std::max<std::size_t>(1, p.target.concurrency);
      if (st.in_flight < st.limit) {
        ++st.in_flight;
        ++in_flight;
        to_start.emplace(std::move(p));
      } else {
        st.queue.push_back(std::move(p));
        ++queued;
      }
    }
  }
  // After drain() or stop() `p` still holds the completion: it is destroyed on return,
  // outside the lock, since destroying it runs the engine's code.
  if (to_start) start(std::move(*to_start));
}

void push_client::impl::start(pending_delivery p) {
  std::string why;
  auto url = parse_http_url(p.target.url, why);
  std::unique_ptr<connection> conn;
  if (url) conn = idle.take(url->host + ":" + url->port);
  const strand_type strand = conn ? conn->strand : asio::make_strand(ex);
  std::shared_ptr<request> r;
  {
    std::lock_guard lock{mutex};
    const auto id = next_id++;
    r = std::make_shared<request>(shared_from_this(), id, std::move(p), strand, std::move(conn));
    live.emplace(id, r);
  }
  r->url = std::move(url);
  r->url_error = std::move(why);
  // The last reference travels with the handler, so the request is
  // destroyed on its strand, never here.
  asio::post(strand, [r = std::move(r)] { r->run(); });
}

void push_client::impl::complete(request& r, std::string result, bool withdrawn_unsent) {
  std::vector<pending_delivery> next;
  bool drop = false;
  {
    std::lock_guard lock{mutex};
    live.erase(r.id);
    ended_locked(r.delivery.task.id);
    drop = stopped;
    --in_flight;
    const auto it = types.find(r.delivery.type);
    if (it != types.end()) {
      auto& st = it->second;
      --st.in_flight;
      while (!stopped && !draining && st.in_flight < st.limit && !st.queue.empty()) {
        next.push_back(std::move(st.queue.front()));
        st.queue.pop_front();
        --queued;
        ++st.in_flight;
        ++in_flight;
      }
      if (st.in_flight == 0 && st.queue.empty()) types.erase(it);
    }
  }
  // Callbacks and starts run outside the lock: `done` may well call
  // deliver() again (the engine's next attempt).
  auto done = std::move(r.delivery.done);
  if (withdrawn_unsent) {
    withdrawn.fetch_add(1, std::memory_order_relaxed);
  } else if (!drop && done) {
    (result.empty() ? sent : failed).fetch_add(1, std::memory_order_relaxed);
    try {
      done(std::move(result));
    } catch (const std::exception& e) {
      delayq::log(delayq::log_level::error,
                  std::string("delayq-server: a push completion threw: ") + e.what());
    } catch (...) {
      delayq::log(delayq::log_level::error, "delayq-server: a push completion threw");
    }
  }
  done = nullptr;
  for (auto& p : next) start(std::move(p));
}

void push_client::impl::drain() {
  std::vector<pending_delivery> dropped;
  {
    std::lock_guard lock{mutex};
    if (stopped || draining) return;
    draining = true;
    drop_queued_locked([](const pending_delivery&) { return true; }, dropped);
  }
  // As in stop(): the completions are destroyed here, outside the lock.
}

void push_client::impl::stop() {
  std::vector<pending_delivery> dropped;
  std::vector<std::shared_ptr<request>> cancelling;
  {
    std::lock_guard lock{mutex};
    if (stopped) return;
    stopped = true;
    stopped_flag = true;
    drop_queued_locked([](const pending_delivery&) { return true; }, dropped);
    for (auto& [id, weak] : live) {
      if (auto r = weak.lock()) cancelling.push_back(std::move(r));
    }
  }
  idle.close_all();
  for (auto& r : cancelling) {
    const strand_type strand = r->strand;
    asio::post(strand, [r = std::move(r)] { r->cancel(); });
  }
  // `dropped` goes out of scope here, outside the lock: its completions are
  // destroyed without a call.
}

void push_client::impl::ended_locked(const std::string& id) {
  const auto it = outstanding.find(id);
  if (it == outstanding.end() || --it->second > 0) return;
  outstanding.erase(it);
  if (withdrawals.erase(id) != 0) withdrawals_held.store(withdrawals.size());
}

bool push_client::impl::withdrawn_since(const pending_delivery& d) const {
  if (withdrawals_held.load() == 0) return false;
  std::lock_guard lock{mutex};
  const auto it = withdrawals.find(d.task.id);
  return it != withdrawals.end() && it->second.covers(d);
}

push_client::push_client(boost::asio::any_io_executor ex, push_client_options options)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(options))) {}

push_client::~push_client() { impl_->stop(); }

void push_client::deliver(const std::string& type, const push_target& target, const delayq::task& t,
                          completion done) {
  impl_->deliver(pending_delivery{type, target, t, std::move(done)});
}

void push_client::drain() { impl_->drain(); }

std::size_t push_client::release_queued(const std::function<bool(const delayq::task&)>& stale) {
  std::vector<pending_delivery> dropped;  // destroyed on return, outside the lock
  {
    std::lock_guard lock(impl_->mutex);
    impl_->drop_queued_locked([&](const pending_delivery& d) { return stale(d.task); }, dropped);
  }
  impl_->withdrawn.fetch_add(dropped.size(), std::memory_order_relaxed);
  return dropped.size();
}

std::size_t push_client::withdraw(std::string_view id, const delayq::task* spare) {
  std::vector<pending_delivery> dropped;  // destroyed on return, outside the lock
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->outstanding.find(id) == impl_->outstanding.end()) return 0;
    // The deliveries accepted so far; those to come are the engine's next
    // attempts, of whatever version holds the id then.
    withdrawal w;
    w.before = impl_->next_seq;
    if (spare) {
      w.spare = true;
      w.type = spare->type;
      w.payload = spare->payload;
      w.due_ms = delayq::to_epoch_ms(spare->due);
    }
    impl_->drop_queued_locked(
        [&](const pending_delivery& d) { return d.task.id == id && w.covers(d); }, dropped);
    // Those started and not yet written see it in send(); also those
    // between the queue and their request (complete() and deliver() start
    // them after letting go of the lock).
    if (impl_->outstanding.find(id) != impl_->outstanding.end()) {
      impl_->withdrawals.insert_or_assign(std::string(id), std::move(w));
      impl_->withdrawals_held.store(impl_->withdrawals.size());
    }
  }
  impl_->withdrawn.fetch_add(dropped.size(), std::memory_order_relaxed);
  return dropped.size();
}

void push_client::stop() { impl_->stop(); }

std::size_t push_client::in_flight() const {
  std::lock_guard lock{impl_->mutex};
  return impl_->in_flight;
}

std::size_t push_client::queued() const {
  std::lock_guard lock{impl_->mutex};
  return impl_->queued;
}

std::uint64_t push_client::sent() const { return impl_->sent.load(std::memory_order_relaxed); }

std::uint64_t push_client::failed() const { return impl_->failed.load(std::memory_order_relaxed); }

std::uint64_t push_client::withdrawn() const {
  return impl_->withdrawn.load(std::memory_order_relaxed);
}

}  // namespace delayq::server
