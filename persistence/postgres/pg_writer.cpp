// persistence/postgres/pg_writer.cpp - see pg_writer.hpp.
#include "pg_writer.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "delayq/log.hpp"

namespace delayq::detail::pg {
namespace {

using steady = std::chrono::steady_clock;

std::string trimmed(const char* text) {
  std::string s = text ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void wake(int fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
}

}  // namespace

write_pipeline::write_pipeline(pool& calls, const schema_sql& sql, std::uint32_t shards,
                               const std::atomic<int>& gen)
    : calls_(calls), sql_(sql), shards_(shards), gen_(gen) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "delayq: postgres write pipeline");
  thread_ = std::thread([this] { run(); });
}

write_pipeline::~write_pipeline() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake(wake_fd_);
  thread_.join();
  ::close(wake_fd_);
}

void write_pipeline::submit(std::span<const store_change> changes, done_fn done) {
  auto b = std::make_unique<open_batch>();
  try {
    b->batch = make_batch(sql_, shards_, gen_.load(std::memory_order_relaxed), changes);
  } catch (const pg_failure& f) {
    log(log_level::error, calls_.log_name() + ": async write failed: " + f.message);
    done(make_error_code(f.code));
    return;
  }
  b->changes = changes;
  b->done = std::move(done);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(b));
  }
  wake(wake_fd_);
}

void write_pipeline::run() {
  for (;;) {
    bool stop = false;
    {
      std::lock_guard lock(mutex_);
      while (!queue_.empty()) {
        fresh_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stop = stopping_;
    }
    if (!fresh_.empty()) start_fresh();
    if (open_.empty()) {
      if (stop) {
        conn_.reset();
        return;
      }
      wait(-1);
      continue;
    }
    if (unflushed_) flush();
    if (!conn_ || !conn_->connected()) continue;
    const auto deadline = last_progress_ + calls_.options().command_timeout;
    const auto now = steady::now();
    if (now >= deadline) {
      fail_open(
          "no answer within " + std::to_string(calls_.options().command_timeout.count()) + " ms",
          true);
      continue;
    }
    wait(static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count()));
  }
}

void write_pipeline::wait(int timeout_ms) {
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {-1, 0, 0}};
  nfds_t n = 1;
  if (!open_.empty() && conn_ && conn_->connected()) {
    fds[1].fd = PQsocket(conn_->get());
    fds[1].events = static_cast<short>(POLLIN | (unflushed_ ? POLLOUT : 0));
    n = 2;
  }
  if (::poll(fds, n, timeout_ms) <= 0) return;
  if (fds[0].revents & POLLIN) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto r = ::read(wake_fd_, &count, sizeof count);
  }
  if (n == 2 && (fds[1].revents & POLLOUT)) flush();
  if (n == 2 && conn_ && conn_->connected() && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
    read();
}

// Appends the fresh batches, dialling first when needed.
void write_pipeline::start_fresh() {
  // An idle connection the server closed meanwhile (a restart) is found out
  // before a batch is sent on it, which would then fail as outcome_unknown.
  if (conn_ && open_.empty() && !conn_->alive()) conn_.reset();
  if (!conn_ || !conn_->connected()) {
    try {
      conn_ = calls_.dial(":writer");
      prepares_sent_.clear();
    } catch (const pg_failure& f) {
      // Nothing of these batches was sent: they did not happen.
      log(log_level::error, calls_.log_name() + ": async write failed: " + f.message);
      while (!fresh_.empty()) {
        auto b = std::move(fresh_.front());
        fresh_.pop_front();
        b->done(make_error_code(f.code));
      }
      return;
    }
  }
  if (open_.empty()) last_progress_ = steady::now();
  while (!fresh_.empty()) {
    open_.push_back(std::move(fresh_.front()));
    fresh_.pop_front();
    append(*open_.back());
    if (!conn_) return;  // lost while sending: fail_open() failed them all
  }
  flush();
}

void write_pipeline::append(open_batch& b) {
  PGconn* c = conn_->get();
  bool ok = true;
  for (std::size_t i = 0; ok && i < b.batch.stmts.size(); ++i) {
    const statement& s = b.batch.stmts[i];
    const params& a = s.args;
    const std::string name(s.name);
    if (!prepares_sent_.contains(s.name)) {
      const std::string sql(s.sql);
      ok = PQsendPrepare(c, name.c_str(), sql.c_str(), a.size(), a.types()) == 1;
      prepares_sent_.emplace(s.name);
      b.expected.push_back({s.name, i});
    }
    ok = ok && PQsendQueryPrepared(c, name.c_str(), a.size(), a.values(), a.lengths(), a.formats(),
                                   1) == 1;
    b.expected.push_back({{}, i});
  }
  ok = ok && PQpipelineSync(c) == 1;
  b.results.resize(b.batch.stmts.size());
  unflushed_ = true;
  if (!ok) fail_open("sending a batch: " + trimmed(PQerrorMessage(c)), false);
}

void write_pipeline::flush() {
  if (!conn_ || !conn_->connected()) return;
  const int f = PQflush(conn_->get());
  if (f < 0) {
    fail_open("sending: " + trimmed(PQerrorMessage(conn_->get())), false);
    return;
  }
  last_progress_ = steady::now();
  if (f == 0) {
    unflushed_ = false;
    for (auto& b : open_) b->sent = true;
  }
}

void write_pipeline::read() {
  PGconn* c = conn_->get();
  if (PQconsumeInput(c) != 1) {
    fail_open("reading: " + trimmed(PQerrorMessage(c)), false);
    return;
  }
  last_progress_ = steady::now();
  while (!open_.empty() && !PQisBusy(c)) {
    open_batch& b = *open_.front();
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
                             calls_.log_name() + ": " + trimmed(PQresultErrorMessage(r.get()))};
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
  if (PQstatus(c) == CONNECTION_BAD) fail_open("the server closed the connection", false);
}

// A prepare that failed (or was skipped) made nothing: the next batch that
// needs the statement prepares it again.
void write_pipeline::forget_prepare(std::string_view name) {
  if (name.empty()) return;
  if (const auto it = prepares_sent_.find(name); it != prepares_sent_.end())
    prepares_sent_.erase(it);
}

void write_pipeline::complete_front() {
  auto b = std::move(open_.front());
  open_.pop_front();
  if (b->error && (b->error->sqlstate == "40001" || b->error->sqlstate == "40P01") &&
      b->conflicts < 3 && conn_ && conn_->connected()) {
    ++b->conflicts;
    b->unsend();
    open_.push_back(std::move(b));
    append(*open_.back());
    if (conn_) flush();
    return;
  }
  boost::system::error_code ec;
  if (b->error) {
    ec = make_error_code(b->error->code);
    log(log_level::error, b->error->message + " (async write)");
  } else {
    settle_batch(b->batch, b->changes, b->results, ec);
  }
  try {
    b->done(ec);
  } catch (const std::exception& e) {
    log(log_level::error, calls_.log_name() + ": a write's completion threw: " + e.what());
  } catch (...) {
    log(log_level::error, calls_.log_name() + ": a write's completion threw");
  }
}

bool write_pipeline::resend_open(const std::string& why) {
  for (const auto& b : open_)
    if (b->retried) return false;
  conn_.reset();
  prepares_sent_.clear();
  unflushed_ = false;
  try {
    conn_ = calls_.dial(":writer");
  } catch (const pg_failure&) {
    return false;
  }
  log(log_level::warning, calls_.log_name() + ": async write: " + why + "; sending " +
                              std::to_string(open_.size()) + " open batch(es) again");
  last_progress_ = steady::now();
  for (auto& b : open_) {
    b->retried = true;
    b->unsend();
    append(*b);
    if (!conn_) return true;  // lost again while sending: fail_open() failed them
  }
  flush();
  return true;
}

void write_pipeline::fail_open(const std::string& why, bool timed_out) {
  if (!timed_out && !open_.empty() && resend_open(why)) return;
  if (conn_ && timed_out) conn_->abandon();
  conn_.reset();
  prepares_sent_.clear();
  unflushed_ = false;
  log(log_level::warning, calls_.log_name() + ": async write: " + why + "; failing " +
                              std::to_string(open_.size()) + " open batch(es)");
  while (!open_.empty()) {
    auto b = std::move(open_.front());
    open_.pop_front();
    // All of it on the wire: the server may have committed it.
    const errc code = b->sent ? errc::outcome_unknown : errc::store_unavailable;
    try {
      b->done(make_error_code(code));
    } catch (...) {
      log(log_level::error, calls_.log_name() + ": a write's completion threw");
    }
  }
  // Batches still unsent in fresh_ dial again at the next start_fresh().
}

}  // namespace delayq::detail::pg
