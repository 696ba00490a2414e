// persistence/redis/write_pipeline.cpp - the pipelined write connection of
// redis_store (see write_pipeline.hpp).
#include "write_pipeline.hpp"

#include <arpa/inet.h>
#include <hiredis/read.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "cluster_router.hpp"
#include "connection.hpp"
#include "delayq/log.hpp"
#include "link_probe.hpp"
#include "store_handshake.hpp"

namespace delayq::detail::redis {

namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

// `opts` with its host replaced by the numeric address `fd` is connected to
// (a Unix socket's path stays): hiredis resolves a host name with a blocking
// getaddrinfo(), and a numeric one without asking anybody.
redis_connection_options numeric_peer(const redis_connection_options& opts, int fd) {
  redis_connection_options o = opts;
  if (!o.unix_socket.empty()) return o;
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return o;
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr = nullptr;
  if (peer.ss_family == AF_INET) addr = &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr;
  if (peer.ss_family == AF_INET6) addr = &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
  if (addr && ::inet_ntop(peer.ss_family, addr, text, sizeof text)) o.host = text;
  return o;
}

}  // namespace

// Everything the handlers touch. Held by them (shared): see
// strand_pipeline.hpp.
struct write_pipeline::core : std::enable_shared_from_this<core> {
  struct open_batch {
    std::unique_ptr<write_batch> batch;
    done_fn done;
    std::uint64_t end = 0;       // stream offset just past its last byte
    bool maybe_applied = false;  // all its bytes reached a socket once
    bool retried = false;        // sent again after a lost connection
    bool evaled = false;         // sent as EVAL (after NOSCRIPT)
    int redirects = 0;           // MOVED / ASK replies it got
  };
  struct expected_reply {
    open_batch* batch;
    bool discard;  // the reply to a sending that was superseded
  };
  // A dial, run on the own thread. With `resend`, for the open batches (a
  // lost connection, a redirect), which fail with `why` when it fails; else
  // for the fresh ones.
  struct dial_job {
    bool resend = false;
    bool retry = false;  // marks the batches sent again after a lost connection
    std::string why;
    std::chrono::milliseconds pause{0};        // waited first (TRYAGAIN, CLUSTERDOWN)
    std::optional<cluster_redirect> redirect;  // a MOVED or an ASK to follow first
  };

  core(const redis_options& o, std::string store_name, unsigned slot, asio::any_io_executor drive,
       bool foreign, asio::io_context& own)
      : opts(o),
        name(std::move(store_name)),
        slot(slot),
        foreign(foreign),
        stopped(foreign ? stopped_probe(drive) : nullptr),
        router(opts, name, client_name_for(opts, ":writer"), store_handshake::writer(opts)),
        strand(asio::make_strand(drive)),
        dialer(own.get_executor()),
        sock(strand),
        probe_sock(strand),
        timer(strand) {}

  using scope = pipeline_life::scope;

  // A copy: the last handler may release the core after the store is gone.
  const redis_options opts;
  const std::string name;
  const unsigned slot;
  const bool foreign;                   // driven on an io_context given, not its own
  const std::function<bool()> stopped;  // of that io_context (strand_pipeline.hpp)
  // The strand's, and the own thread's during a dial (`dialing`): router,
  // cur, ask, asking.
  cluster_router router;
  connection* cur = nullptr;  // the connection in use, of router
  connection* ask = nullptr;  // after an ASK: the node it named
  bool asking = false;        // cur is ask: each batch goes behind an ASKING
  asio::strand<asio::any_io_executor> strand;
  asio::any_io_executor dialer;

  // The strand's.
  socket_watch sock;        // cur's socket
  socket_watch probe_sock;  // the side dial's
  asio::steady_timer timer;
  steady::time_point timer_at{};
  bool timing = false, dialing = false;
  std::optional<steady::time_point> unstable_since;  // TRYAGAIN since
  std::chrono::milliseconds pause{10};
  std::deque<std::unique_ptr<open_batch>> fresh, open;
  std::deque<expected_reply> expected;
  std::string out;
  std::size_t out_sent = 0;       // bytes of out already written
  std::uint64_t stream_base = 0;  // stream offset of out[0]
  steady::time_point last_progress{};
  link_probe probe;  // the side dial of a late reply
  // Whom it dials: cur's server, by the numeric address of the connection's
  // peer (set with each dial), so that starting it never waits for DNS on
  // the strand's thread.
  redis_connection_options probe_to;
  steady::time_point probe_started{}, checked_at{};
  std::array<char, 64 * 1024> reply_bytes{};  // what the socket read holds

  pipeline_life life;  // any thread's

  bool connected() const noexcept { return cur && cur->connected(); }
  int fd() const noexcept { return cur->get()->fd; }

  void take(std::unique_ptr<open_batch> b) {
    fresh.push_back(std::move(b));
    step();
  }

  // Sends what is fresh (dialling first when needed), meets the deadlines,
  // and arms the waits the state needs.
  void step() {
    for (;;) {
      if (dialing) return;  // dialled() steps again
      if (!fresh.empty()) start_fresh();
      if (dialing) return;
      if (open.empty()) {
        end_probe();
        return;
      }
      flush();
      if (dialing) return;
      if (!connected()) {
        fail_open("no connection");
        continue;
      }
      const auto deadline = last_progress + opts.command_timeout;
      const auto now = steady::now();
      if (now >= deadline) {
        end_probe();
        on_lost(0, false, true,
                "no answer within " + std::to_string(opts.command_timeout.count()) + " ms");
        continue;
      }
      if (!link_holds(now)) continue;
      arm(deadline);
      return;
    }
  }

  // With batches open and nothing moving for link_check, dials the server on
  // the side (link_probe.hpp); false when that dial failed and the open
  // batches were failed as after command_timeout.
  bool link_holds(steady::time_point now) {
    if (!probe.running()) {
      if (!link_check_due(opts, now - std::max(last_progress, checked_at))) return true;
      probe.start(probe_to);
      probe_started = now;
      if (probe.running()) probe_sock.watch(probe.fd());
    }
    switch (probe.check(now)) {
      case link_probe::result::pending: return true;
      case link_probe::result::reachable:
        probe_sock.release();
        checked_at = now;
        return true;
      case link_probe::result::unreachable: break;
    }
    probe_sock.release();
    checked_at = now;
    // A reply that came while the dial was out shows the link works.
    if (last_progress >= probe_started) return true;
    on_lost(0, false, true,
            "no answer for " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress)
                        .count()) +
                " ms, and a new connection failed: " + probe.why());
    return false;
  }

  void end_probe() {
    probe.reset();
    probe_sock.release();
  }

  // The waits of open batches: the socket's (readable; writable while
  // output waits), the side dial's, and the timer of the next deadline
  // (command_timeout, the side dial's, or the next link check).
  void arm(steady::time_point deadline) {
    if (!sock.watching() && !sock.watch(fd())) {
      fail_open("the connection's socket cannot be watched: " + std::string(std::strerror(errno)));
      return;
    }
    sock.read(asio::buffer(reply_bytes), [self = shared_from_this()](boost::system::error_code ec,
                                                                     std::size_t n, bool current) {
      const scope in(self->life);
      if (!in.ok()) return;
      if (current && !self->dialing && self->connected()) self->received(ec, n);
      self->step();
    });
    if (out_sent < out.size()) {
      sock.wait(socket_watch::wait_type::wait_write, [self = shared_from_this()] {
        const scope in(self->life);
        if (!in.ok()) return;
        if (!self->dialing) self->flush();
        self->step();
      });
    }
    if (probe.running()) {
      probe_sock.wait(socket_watch::wait_type::wait_write, [self = shared_from_this()] {
        const scope in(self->life);
        if (in.ok()) self->step();
      });
    }
    auto wake = deadline;
    if (probe.running()) {
      wake = std::min(wake, probe.deadline());
    } else if (opts.link_check.count() > 0) {
      wake = std::min(wake, std::max(last_progress, checked_at) + opts.link_check);
    }
    // Deadlines only move later while the timer waits, save a side dial's,
    // which starts in step(), right before: a wait is queued again only
    // when it would end too late (and never on each batch).
    if (timing && timer_at <= wake) return;
    timing = true;
    timer_at = wake;
    timer.expires_at(wake);
    timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted) return;  // replaced, or closing
      const scope in(self->life);
      if (!in.ok()) return;
      self->timing = false;
      self->step();
    });
  }

  // Appends the fresh batches, dialling first when needed.
  void start_fresh() {
    // A connection the server closed while nothing was open on it (a
    // restart, an idle timeout) is dialled anew before a batch goes out on
    // it, so that the batch is not sent into a closed socket and then found
    // maybe-applied.
    if (open.empty() && connected()) {
      char c = 0;
      const ssize_t n = ::recv(fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        drop_conn(false);
    }
    if (!connected()) {
      dial({});
      return;
    }
    while (!fresh.empty()) {
      open.push_back(std::move(fresh.front()));
      fresh.pop_front();
      if (expected.empty()) last_progress = steady::now();
      append(*open.back(), false);
    }
  }

  // Dials on the own thread (it blocks); the strand leaves the router and
  // the connections alone until dialled() runs on it.
  void dial(dial_job job) {
    dialing = true;
    sock.release();
    life.unless_closed([&] {
      asio::post(dialer, [self = shared_from_this(), job = std::move(job)]() mutable {
        self->dial_here(std::move(job));
      });
    });
  }

  void dial_here(dial_job job) {
    sigpipe_guard guard;  // the handshake writes with write(2)
    if (job.pause.count() > 0) std::this_thread::sleep_for(job.pause);
    std::optional<redis_failure> failure;
    try {
      if (job.redirect) follow(*job.redirect);
      connect();
    } catch (const redis_failure& f) {
      failure = f;
    }
    asio::post(strand, [self = shared_from_this(), job = std::move(job),
                        failure = std::move(failure)]() mutable {
      const scope in(self->life);
      if (!in.ok()) return;
      self->dialing = false;
      self->dialled(job, failure);
    });
  }

  // The own thread's: notes a MOVED (reading the slot map again) or turns
  // to the node an ASK named.
  void follow(const cluster_redirect& r) {
    if (r.kind == cluster_redirect::moved) {
      ask = nullptr;
      router.moved(r.slot, r.host, r.port);
    } else {
      ask = &router.node(r.host, r.port);
    }
  }

  // The own thread's: connects to the node the batches go to, the one an
  // ASK named, else the owner of the slot (the only node without cluster
  // mode). Throws redis_failure.
  void connect() {
    cur = ask ? ask : &router.owner(slot);
    asking = ask != nullptr;
    try {
      cur->ensure_connected();
    } catch (const redis_failure& f) {
      // A master that cannot be reached may have failed over, and a dead one
      // never answers MOVED: read the slot map again and dial the slot's new
      // owner, if it has one (as cluster_router::try_run does).
      if (!opts.cluster || ask || f.code != errc::store_unavailable) throw;
      connection* now = nullptr;
      try {
        router.refresh();
        now = &router.owner(slot);
      } catch (const redis_failure&) {
      }
      if (!now || now == cur) throw;
      cur = now;
      cur->ensure_connected();
    }
    probe_to = numeric_peer(cur->options(), fd());
  }

  void dialled(const dial_job& job, const std::optional<redis_failure>& failure) {
    if (failure) {
      if (job.resend) {
        log(log_level::error, name + ": " + failure->message);
        fail_open(job.why);
      } else {
        fail_unsent(fresh, life, name, failure->message, make_error_code(failure->code));
      }
      step();
      return;
    }
    out.clear();
    out_sent = 0;
    stream_base = 0;
    if (job.resend) {
      last_progress = steady::now();
      for (auto& b : open) {
        if (job.retry) b->retried = true;
        append(*b, b->evaled);
      }
      flush();
    }
    step();
  }

  void append(open_batch& b, bool eval) {
    if (out_sent == out.size()) {
      stream_base += out.size();
      out.clear();
      out_sent = 0;
    }
    b.evaled = eval;
    if (asking) {
      out += "*1\r\n$6\r\nASKING\r\n";
      expected.push_back({&b, true});  // its +OK
    }
    out += eval ? b.batch->eval_head() : b.batch->head(write_sha(*cur));
    out += b.batch->tail();
    b.end = stream_base + out.size();
    expected.push_back({&b, false});
  }

  void flush() {
    if (!connected()) return;
    while (out_sent < out.size()) {
      const ssize_t n =
          ::send(fd(), out.data() + out_sent, out.size() - out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        out_sent += static_cast<std::size_t>(n);
        last_progress = steady::now();
        const std::uint64_t sent = stream_base + out_sent;
        for (auto& b : open)
          if (b->end <= sent) b->maybe_applied = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      const int e = errno;
      on_lost(e, false, false, std::strerror(e));
      return;
    }
  }

  // What a read of the socket brought: replies, the end of the connection,
  // or an error.
  void received(boost::system::error_code ec, std::size_t n) {
    if (ec == asio::error::eof) {
      on_lost(0, true, false, "closed by the server");
      return;
    }
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      on_lost(ec.value(), false, false, ec.message());
      return;
    }
    last_progress = steady::now();
    if (redisReaderFeed(cur->get()->reader, reply_bytes.data(), n) != REDIS_OK) {
      on_lost(0, false, false, "bad reply from the server");
      return;
    }
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(cur->get()->reader, &raw) != REDIS_OK) {
        on_lost(0, false, false, "bad reply from the server");
        return;
      }
      if (!raw) return;
      on_reply(static_cast<redisReply*>(raw));
      // `dialing` first: the dialling thread owns `cur` now.
      if (dialing || !connected()) return;
    }
  }

  void on_reply(redisReply* raw) {
    const reply_ptr r(raw);
    if (expected.empty()) {
      on_lost(0, false, false, "a reply nobody asked for");
      return;
    }
    const expected_reply e = expected.front();
    expected.pop_front();
    if (e.discard) return;
    open_batch& b = *e.batch;
    if (opts.cluster) {
      const cluster_redirect redirect = parse_redirect(r.get());
      if (redirect.kind != cluster_redirect::none) {
        on_redirect(redirect);
        return;
      }
    }
    if (is_noscript(r.get()) && !b.evaled) {
      // The server lost the script: every open batch goes again as EVAL, in
      // order, and the replies still due for their first sending are dropped.
      log(log_level::warning, name + ": the server lost the write script (NOSCRIPT); sending " +
                                  std::to_string(open.size()) + " batch(es) again with EVAL");
      for (expected_reply& later : expected) later.discard = true;
      for (auto& o : open) append(*o, true);
      flush();
      return;
    }
    unstable_since.reset();
    pause = std::chrono::milliseconds{10};
    boost::system::error_code ec;
    if (r->type == REDIS_REPLY_ERROR) {
      const redis_failure f = server_error("async write", r.get());
      log(log_level::error, name + ": " + f.message);
      ec = make_error_code(f.code);
    }
    complete(ec);
    if (ask && open.empty()) {
      // Every batch an ASK sent to the importing node has its answer: an ASK
      // is good for the redirected commands only, so later batches go to the
      // slot's owner again (its MOVED, once the migration ends, says where).
      ask = nullptr;
      asking = false;
      cur = nullptr;
      sock.release();
    }
  }

  // Pops the oldest open batch and calls its `done`.
  void complete(boost::system::error_code ec) {
    std::unique_ptr<open_batch> b = std::move(open.front());
    open.pop_front();
    finish(*b, ec);
  }

  void finish(open_batch& b, boost::system::error_code ec) { life.finish(b.done, ec, name); }

  void drop_conn(bool timed_out, bool withdraw = false) {
    sock.release();
    if (cur) cur->drop(timed_out, withdraw);
  }

  void on_lost(int saved_errno, bool eof, bool timed_out, const std::string& why) {
    drop_conn(timed_out);
    ask = nullptr;
    expected.clear();
    const bool retryable = eof || saved_errno == ECONNRESET || saved_errno == EPIPE ||
                           saved_errno == ECONNABORTED || saved_errno == ENOTCONN;
    // Sent again only when none of the open batches may have run: one whose
    // every byte reached the socket may have run before the connection went,
    // and running it twice is not harmless in a cluster (another instance
    // may have run and removed the task it saved meanwhile). A server that
    // closed an idle connection is seen before a batch is sent on it
    // (start_fresh()).
    bool retried = false, maybe_ran = false;
    for (auto& b : open) {
      retried = retried || b->retried;
      maybe_ran = maybe_ran || b->maybe_applied;
    }
    if (retryable && !retried && !maybe_ran && !open.empty()) {
      log(log_level::warning, name + ": write connection lost (" + why + "); reconnecting and " +
                                  "sending " + std::to_string(open.size()) + " batch(es) again");
      dial({.resend = true, .retry = true, .why = why});
      return;
    }
    fail_open(why);
  }

  // The oldest open batch got a redirect (or TRYAGAIN / CLUSTERDOWN): it did
  // not run (after TRYAGAIN / CLUSTERDOWN a later one may have: see the
  // header).
  void on_redirect(const cluster_redirect& r) {
    // Every open batch goes again, on a connection of its node: a copy the
    // old node has not received yet must never reach it later (after the
    // resend, where it would run after newer writes if it still serves the
    // slot), so the connection is reset, not closed gently.
    drop_conn(false, true);
    expected.clear();
    open_batch& b = *open.front();
    dial_job job{.resend = true, .why = "cannot reach the node after '" + r.text + "'"};
    if (r.kind == cluster_redirect::retry) {
      const auto now = steady::now();
      if (!unstable_since) unstable_since = now;
      if (now - *unstable_since >= opts.command_timeout) {
        fail_open("the cluster kept answering '" + r.text + "'");
        return;
      }
      job.pause = pause;
      pause = std::min(pause * 2, std::chrono::milliseconds{200});
    } else {
      if (++b.redirects > cluster_router::max_redirects) {
        log(log_level::error, name + ": async write failed: more than " +
                                  std::to_string(cluster_router::max_redirects) +
                                  " cluster redirects (last: '" + r.text + "')");
        complete(make_error_code(errc::store_error));
        if (open.empty()) return;
      }
      job.redirect = r;
    }
    log(log_level::info,
        name + ": '" + r.text + "': sending " + std::to_string(open.size()) + " batch(es) again");
    dial(std::move(job));
  }

  // The connection (already dropped, with a reset when it timed out, by
  // whoever found it lost) is closed for good.
  void fail_open(const std::string& why) {
    drop_conn(false);
    ask = nullptr;
    unstable_since.reset();
    expected.clear();
    out.clear();
    out_sent = 0;
    stream_base = 0;
    log(log_level::error,
        name + ": write connection to " + (cur ? cur->options().address() : opts.address()) +
            " dropped (" + why + "); failing " + std::to_string(open.size()) + " open batch(es)");
    while (!open.empty()) {
      // A batch whose every byte reached the socket may have run, whether the
      // answer then timed out or the connection was lost (the server may have
      // applied it, and fsynced it, just before it died): outcome_unknown, as
      // the store contract asks. Only a batch not wholly sent is known not to
      // have run (Redis never runs an incomplete command).
      const bool unknown = open.front()->maybe_applied;
      complete(make_error_code(unknown ? errc::outcome_unknown : errc::store_unavailable));
    }
  }
};

write_pipeline::write_pipeline(const redis_options& opts, std::string store_name, unsigned slot,
                               asio::any_io_executor io)
    : core_(std::make_shared<core>(opts, std::move(store_name), slot,
                                   io ? io : own_.io().get_executor(), static_cast<bool>(io),
                                   own_.io())) {}

write_pipeline::~write_pipeline() {
  // Each batch ends within command_timeout of its last progress, or fails
  // at once.
  core_->life.close(core_->foreign, core_->stopped,
                    2 * core_->opts.command_timeout + std::chrono::seconds{1}, core_->name);
  // The waits end on the strand; the connections close when the core goes
  // (on an io_context that no longer runs, with the handler holding it).
  asio::post(core_->strand, [self = core_] {
    self->sock.release();
    self->end_probe();
    self->timer.cancel();
  });
  // The own thread ends once nothing is queued on it (the strand's last
  // handlers, without an executor given; a dial under way).
  own_.join();
}

void write_pipeline::submit(std::unique_ptr<write_batch> batch, done_fn done) {
  auto b = std::make_unique<core::open_batch>();
  b->batch = std::move(batch);
  b->done = std::move(done);
  core_->life.submitted();
  // Deferred, not posted: submitted on a thread of the io_context the
  // strand runs on, the batch is sent by that thread once the submitting
  // handler returns, instead of waking another thread of it (or the
  // reactor, with an epoll_ctl) for it. From any other thread a defer is a
  // post.
  asio::defer(core_->strand, [self = core_, b = std::move(b)]() mutable {
    // A pipeline gone meanwhile (its io_context stopped, and ran again
    // later): its store went with it.
    const core::scope in(self->life);
    if (in.ok()) self->take(std::move(b));
  });
}

}  // namespace delayq::detail::redis
