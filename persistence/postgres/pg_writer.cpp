// persistence/postgres/pg_writer.cpp - see pg_writer.hpp.
#include "pg_writer.hpp"

#include <poll.h>

#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "delayq/log.hpp"

namespace delayq::detail::pg {
namespace {

using steady = std::chrono::steady_clock;
namespace asio = boost::asio;

std::string trimmed(const char* text) {
  std::string s = text ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Whether `fd` is ready for `events` now, without waiting.
bool ready_now(int fd, short events) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace

// Everything the handlers touch. Held by them (shared): see
// strand_pipeline.hpp.
struct write_pipeline::core : std::enable_shared_from_this<core> {
  struct open_batch {
    write_batch batch;
    std::span<const store_change> changes;
    done_fn done;
    // What each query result of the pipeline belongs to: a prepare (its
    // name) or a statement (its index).
    std::vector<std::pair<std::string_view, std::size_t>> expected;
    std::size_t at = 0;        // the expected result being read
    bool have_result = false;  // of expected[at]
    std::vector<result_ptr> results;
    std::optional<pg_failure> error;
    bool sent = false;     // all of it reached the socket
    bool retried = false;  // sent again after a lost connection
    int conflicts = 0;     // sent again after a serialization failure or deadlock

    // Forgets what a sending of it left, before it is sent again.
    void unsend() {
      sent = false;
      expected.clear();
      at = 0;
      have_result = false;
      results.clear();
      error.reset();
    }
  };

  core(pool& calls, const schema_sql& sql, std::uint32_t shards, const std::atomic<int>& gen,
       asio::any_io_executor drive, bool foreign, asio::io_context& own)
      : calls(calls),
        name(calls.log_name()),
        command_timeout(calls.options().command_timeout),
        foreign(foreign),
        stopped(foreign ? stopped_probe(drive) : nullptr),
        sql(sql),
        shards(shards),
        gen(gen),
        strand(asio::make_strand(drive)),
        dialer(own.get_executor()),
        sock(strand),
        timer(strand) {}

  ~core() { drop_connection(false); }

  using scope = pipeline_life::scope;

  // --- the strand's ---------------------------------------------------------

  void take(std::unique_ptr<open_batch> b) {
    fresh.push_back(std::move(b));
    step();
  }

  // Sends what is fresh (dialling first when needed) and arms the waits the
  // state needs.
  void step() {
    if (!fresh.empty() && !dialing) start_fresh();
    arm();
  }

  void start_fresh() {
    // An idle connection the server closed meanwhile (a restart) is found
    // out before a batch is sent on it, which would then fail as
    // outcome_unknown. Only a readable socket can hold that news.
    if (conn && open.empty() && ready_now(PQsocket(conn->get()), POLLIN)) {
      sock.release();
      if (!conn->alive())
        conn.reset();
      else
        watch_socket();
    }
    if (!conn || !conn->connected()) {
      drop_connection(false);
      dial(false);
      return;
    }
    if (open.empty()) last_progress = steady::now();
    while (!fresh.empty()) {
      open.push_back(std::move(fresh.front()));
      fresh.pop_front();
      append(*open.back());
      if (!conn) return;  // lost while sending: fail_open() saw to them
    }
    flush();
  }

  // Dials on the pipeline's own thread (it blocks); the connection comes
  // back to the strand. `resend`: for the open batches (a lost connection),
  // else for the fresh ones.
  void dial(bool resend) {
    dialing = true;
    life.unless_closed([&] { post_dial(resend); });
  }

  void post_dial(bool resend) {
    asio::post(dialer, [self = shared_from_this(), resend] {
      std::unique_ptr<connection> c;
      std::optional<pg_failure> failure;
      try {
        c = self->calls.dial(":writer");
      } catch (const pg_failure& f) {
        failure = f;
      }
      auto held = std::make_shared<std::unique_ptr<connection>>(std::move(c));
      asio::post(self->strand, [self, resend, held, failure = std::move(failure)]() mutable {
        const scope in(self->life);
        if (!in.ok()) return;
        self->dialing = false;
        self->dialled(resend, std::move(*held), std::move(failure));
      });
    });
  }

  void dialled(bool resend, std::unique_ptr<connection> c, std::optional<pg_failure> failure) {
    if (failure) {
      if (resend) {
        fail_open(resend_why, false, false);
      } else {
        fail_unsent(fresh, life, name, failure->message, make_error_code(failure->code));
      }
      step();
      return;
    }
    conn = std::move(c);
    prepares_sent.clear();
    watch_socket();
    if (resend) {
      log(log_level::warning, name + ": async write: " + resend_why + "; sending " +
                                  std::to_string(open.size()) + " open batch(es) again");
      last_progress = steady::now();
      for (auto& b : open) {
        b->retried = true;
        b->unsend();
        append(*b);
        if (!conn) break;  // lost again while sending: fail_open() failed them
      }
      if (conn) flush();
    }
    step();
  }

  void append(open_batch& b) {
    PGconn* c = conn->get();
    bool ok = true;
    for (std::size_t i = 0; ok && i < b.batch.stmts.size(); ++i) {
      const statement& s = b.batch.stmts[i];
      const params& a = s.args;
      const std::string name(s.name);
      if (!prepares_sent.contains(s.name)) {
        const std::string text(s.sql);
        ok = PQsendPrepare(c, name.c_str(), text.c_str(), a.size(), a.types()) == 1;
        prepares_sent.emplace(s.name);
        b.expected.push_back({s.name, i});
      }
      ok = ok && PQsendQueryPrepared(c, name.c_str(), a.size(), a.values(), a.lengths(),
                                     a.formats(), 1) == 1;
      b.expected.push_back({{}, i});
    }
    ok = ok && PQpipelineSync(c) == 1;
    b.results.resize(b.batch.stmts.size());
    unflushed = true;
    if (!ok) fail_open("sending a batch: " + trimmed(PQerrorMessage(c)), false);
  }

  void flush() {
    if (!conn || !conn->connected()) return;
    const int f = PQflush(conn->get());
    if (f < 0) {
      fail_open("sending: " + trimmed(PQerrorMessage(conn->get())), false);
      return;
    }
    last_progress = steady::now();
    if (f == 0) {
      unflushed = false;
      for (auto& b : open) b->sent = true;
    }
  }

  void read() {
    PGconn* c = conn->get();
    if (PQconsumeInput(c) != 1) {
      fail_open("reading: " + trimmed(PQerrorMessage(c)), false);
      return;
    }
    last_progress = steady::now();
    while (conn && !open.empty() && !PQisBusy(c)) {
      open_batch& b = *open.front();
      result_ptr r(PQgetResult(c));
      if (!r) {
        if (b.at < b.expected.size()) {
          ++b.at;
          b.have_result = false;
          continue;
        }
        break;  // nothing more buffered
      }
      const ExecStatusType st = PQresultStatus(r.get());
      if (st == PGRES_PIPELINE_SYNC) {
        complete_front();
        continue;
      }
      if (b.at >= b.expected.size()) {
        fail_open("an unexpected result", false);
        return;
      }
      const auto& [prepare, index] = b.expected[b.at];
      if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
        forget_prepare(prepare);
        if (!b.error) {
          const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
          b.error = pg_failure{state ? sqlstate_errc(state) : errc::store_error,
                               name + ": " + trimmed(PQresultErrorMessage(r.get()))};
          if (state) b.error->sqlstate = state;
        }
      } else if (st == PGRES_PIPELINE_ABORTED) {
        forget_prepare(prepare);
      } else if (prepare.empty() && !b.have_result) {
        b.results[index] = std::move(r);
        b.have_result = true;
      }
      if (PQstatus(c) == CONNECTION_BAD) {
        fail_open("the server closed the connection", false);
        return;
      }
    }
    if (conn && PQstatus(c) == CONNECTION_BAD) fail_open("the server closed the connection", false);
  }

  // A prepare that failed (or was skipped) made nothing: the next batch that
  // needs the statement prepares it again.
  void forget_prepare(std::string_view name) {
    if (name.empty()) return;
    if (const auto it = prepares_sent.find(name); it != prepares_sent.end())
      prepares_sent.erase(it);
  }

  void complete_front() {
    auto b = std::move(open.front());
    open.pop_front();
    if (b->error && (b->error->sqlstate == "40001" || b->error->sqlstate == "40P01") &&
        b->conflicts < 3 && conn && conn->connected()) {
      ++b->conflicts;
      b->unsend();
      open.push_back(std::move(b));
      append(*open.back());
      if (conn) flush();
      return;
    }
    boost::system::error_code ec;
    if (b->error) {
      ec = make_error_code(b->error->code);
      log(log_level::error, b->error->message + " (async write)");
    } else {
      settle_batch(b->batch, b->changes, b->results, ec);
    }
    finish(*b, ec);
  }

  // `timed_out`: nothing moved for command_timeout. `may_resend`: a broken
  // connection may be dialled once more for the open batches.
  void fail_open(const std::string& why, bool timed_out, bool may_resend = true) {
    if (!timed_out && may_resend && !open.empty()) {
      bool retried = false;
      for (const auto& b : open) retried = retried || b->retried;
      if (!retried) {
        drop_connection(false);
        unflushed = false;
        resend_why = why;
        dial(true);
        return;
      }
    }
    drop_connection(timed_out);
    unflushed = false;
    log(log_level::warning, name + ": async write: " + why + "; failing " +
                                std::to_string(open.size()) + " open batch(es)");
    while (!open.empty()) {
      auto b = std::move(open.front());
      open.pop_front();
      // All of it on the wire: the server may have committed it.
      finish(*b, make_error_code(b->sent ? errc::outcome_unknown : errc::store_unavailable));
    }
    // Batches still fresh dial again at the next step().
  }

  void finish(open_batch& b, boost::system::error_code ec) { life.finish(b.done, ec, name); }

  // The waits the state needs: the socket's while batches are open, and the
  // command_timeout's.
  void arm() {
    if (open.empty() || !conn || !conn->connected()) return;
    if (!sock.watching()) return fail_open("the connection has no socket", false);
    sock.wait(socket_watch::wait_type::wait_read, [self = shared_from_this()] {
      const scope in(self->life);
      if (in.ok()) self->on_readable();
    });
    if (unflushed) {
      sock.wait(socket_watch::wait_type::wait_write, [self = shared_from_this()] {
        const scope in(self->life);
        if (!in.ok()) return;
        if (self->conn && self->unflushed) self->flush();
        self->step();
      });
    }
    if (!timing) {
      timing = true;
      timer.expires_at(last_progress + command_timeout);
      timer.async_wait([self = shared_from_this()](boost::system::error_code) {
        const scope in(self->life);
        if (!in.ok()) return;
        self->timing = false;
        self->on_timer();
      });
    }
  }

  void on_readable() {
    if (conn && conn->connected() && !open.empty()) read();
    step();
  }

  void on_timer() {
    if (!open.empty() && conn && conn->connected()) {
      const auto deadline = last_progress + command_timeout;
      if (steady::now() >= deadline)
        fail_open("no answer within " + std::to_string(command_timeout.count()) + " ms", true);
    }
    step();
  }

  // libpq closes its own socket when the server goes (in PQconsumeInput,
  // say): the reactor watches a duplicate (socket_watch).
  void watch_socket() {
    sock.watch(PQsocket(conn->get()));  // when it cannot, arm() fails the open batches
  }

  void drop_connection(bool abandon) {
    sock.release();
    if (conn && abandon) conn->abandon();
    conn.reset();
    prepares_sent.clear();
  }

  // `calls` and `sql` are the backend's: dial() and submit() use them, and
  // a batch's statements hold views into `sql`. Handlers read the copies
  // below for the rest, and none runs once the destructor has returned (it
  // waits for the running scopes).
  pool& calls;
  const std::string name;
  const std::chrono::milliseconds command_timeout;
  const bool foreign;                   // driven on an io_context given, not its own
  const std::function<bool()> stopped;  // of that io_context (strand_pipeline.hpp)
  const schema_sql& sql;
  std::uint32_t shards;
  const std::atomic<int>& gen;
  asio::strand<asio::any_io_executor> strand;
  asio::any_io_executor dialer;

  // The strand's.
  std::unique_ptr<connection> conn;
  socket_watch sock;
  bool timing = false, dialing = false;
  asio::steady_timer timer;
  std::set<std::string, std::less<>> prepares_sent;  // on conn, answered or not
  std::deque<std::unique_ptr<open_batch>> fresh, open;
  bool unflushed = false;
  steady::time_point last_progress{};
  std::string resend_why;

  pipeline_life life;  // any thread's
};

write_pipeline::write_pipeline(pool& calls, const schema_sql& sql, std::uint32_t shards,
                               const std::atomic<int>& gen, asio::any_io_executor io)
    : core_(std::make_shared<core>(calls, sql, shards, gen, io ? io : own_.io().get_executor(),
                                   static_cast<bool>(io), own_.io())) {}

write_pipeline::~write_pipeline() {
  // Each batch ends within command_timeout of its last progress, or fails
  // at once.
  core_->life.close(core_->foreign, core_->stopped,
                    2 * core_->command_timeout + std::chrono::seconds{1}, core_->name);
  // The connection closes on the strand; on an io_context that no longer
  // runs, when the core goes (the handler is destroyed with the io_context).
  asio::post(core_->strand, [self = core_] {
    self->drop_connection(false);
    self->timer.cancel();
  });
  // The own thread ends once nothing is queued on it (the strand's last
  // handlers, without an executor given; a dial under way).
  own_.join();
}

void write_pipeline::submit(std::span<const store_change> changes, done_fn done) {
  auto b = std::make_unique<core::open_batch>();
  try {
    b->batch =
        make_batch(core_->sql, core_->shards, core_->gen.load(std::memory_order_relaxed), changes);
  } catch (const pg_failure& f) {
    log(log_level::error, core_->name + ": async write failed: " + f.message);
    done(make_error_code(f.code));
    return;
  }
  b->changes = changes;
  b->done = std::move(done);
  core_->life.submitted();
  // Deferred, not posted: submitted on a thread of the io_context the
  // strand runs on, the batch is sent by that thread once the submitting
  // handler returns, instead of waking another thread of it (or the
  // reactor, with an epoll_ctl) for it. From any other thread a defer is a
  // post.
  asio::defer(core_->strand, [self = core_, b = std::move(b)]() mutable {
    // A pipeline gone meanwhile (its io_context stopped, and ran again
    // later): `calls` and `sql` went with it.
    const core::scope in(self->life);
    if (in.ok()) self->take(std::move(b));
  });
}

}  // namespace delayq::detail::pg
