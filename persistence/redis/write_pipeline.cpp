// persistence/redis/write_pipeline.cpp - the pipelined write connection of
// redis_store (see write_pipeline.hpp).
#include "write_pipeline.hpp"

#include <hiredis/read.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

#include "delayq/log.hpp"
#include "store_handshake.hpp"

namespace delayq::detail::redis {

write_pipeline::write_pipeline(const redis_options& opts, std::string store_name, unsigned slot)
    : opts_(opts),
      name_(std::move(store_name)),
      slot_(slot),
      router_(opts, name_, client_name_for(opts, ":writer"), store_handshake::writer(opts)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "delayq: redis write pipeline");
  thread_ = std::thread([this] { run(); });
}

write_pipeline::~write_pipeline() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
  ::close(wake_fd_);
}

void write_pipeline::submit(std::unique_ptr<write_batch> batch, done_fn done) {
  auto b = std::make_unique<open_batch>();
  b->batch = std::move(batch);
  b->done = std::move(done);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(b));
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

void write_pipeline::run() {
  sigpipe_guard guard;  // the handshake writes with write(2)
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
      probe_.reset();
      if (stop) return;
      wait(-1);
      continue;
    }
    flush();
    if (!connected()) continue;
    const auto deadline = last_progress_ + opts_.command_timeout;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      probe_.reset();
      on_lost(0, false, true,
              "no answer within " + std::to_string(opts_.command_timeout.count()) + " ms");
      continue;
    }
    if (!link_holds(now)) continue;
    auto wake = deadline;
    if (probe_.running()) {
      wake = std::min(wake, probe_.deadline());
    } else if (opts_.link_check.count() > 0) {
      wake = std::min(wake, std::max(last_progress_, checked_at_) + opts_.link_check);
    }
    wait(static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                              std::max(wake - now, std::chrono::steady_clock::duration::zero()))
                              .count()));
  }
}

// With batches open and nothing moving for link_check, dials the server on
// the side (link_probe.hpp); false when that dial failed and the open
// batches were failed as after command_timeout.
bool write_pipeline::link_holds(std::chrono::steady_clock::time_point now) {
  if (!probe_.running()) {
    if (!link_check_due(opts_, now - std::max(last_progress_, checked_at_))) return true;
    probe_.start(cur_->options());
    probe_started_ = now;
  }
  switch (probe_.check(now)) {
    case link_probe::result::pending: return true;
    case link_probe::result::reachable: checked_at_ = now; return true;
    case link_probe::result::unreachable: break;
  }
  checked_at_ = now;
  // A reply that came while the dial was out shows the link works.
  if (last_progress_ >= probe_started_) return true;
  on_lost(
      0, false, true,
      "no answer for " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_).count()) +
          " ms, and a new connection failed: " + probe_.why());
  return false;
}

// Waits for a submission, or for the socket when batches are open.
void write_pipeline::wait(int timeout_ms) {
  // The probe's socket last, so that its place never shifts the others'.
  pollfd fds[3] = {{wake_fd_, POLLIN, 0}, {-1, 0, 0}, {probe_.fd(), POLLOUT, 0}};
  nfds_t n = 1;
  if (!open_.empty() && connected()) {
    fds[1].fd = conn().get()->fd;
    fds[1].events = static_cast<short>(POLLIN | (out_sent_ < out_.size() ? POLLOUT : 0));
    n = 2;
  }
  if (::poll(fds, fds[2].fd >= 0 ? 3 : n, timeout_ms) <= 0) return;
  if (fds[0].revents & POLLIN) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto r = ::read(wake_fd_, &count, sizeof count);
  }
  if (n == 2 && (fds[1].revents & POLLOUT)) flush();
  if (n == 2 && connected() && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) read();
}

// Appends the fresh batches, dialling first when needed.
void write_pipeline::start_fresh() {
  // A connection the server closed while nothing was open on it (a restart,
  // an idle timeout) is dialled anew before a batch goes out on it, so that
  // the batch is not sent into a closed socket and then found maybe-applied.
  if (open_.empty() && connected()) {
    char c = 0;
    const ssize_t n = ::recv(conn().get()->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      cur_->drop(false);
  }
  while (!fresh_.empty()) {
    if (!connected()) {
      try {
        dial();
        out_.clear();
        out_sent_ = 0;
        stream_base_ = 0;
      } catch (const redis_failure& f) {
        // Nothing of these batches was sent: they did not happen.
        log(log_level::error, name_ + ": async write failed: " + f.message);
        while (!fresh_.empty()) {
          open_.push_back(std::move(fresh_.front()));
          fresh_.pop_front();
          complete(make_error_code(f.code));
        }
        return;
      }
    }
    open_batch& b = *fresh_.front();
    open_.push_back(std::move(fresh_.front()));
    fresh_.pop_front();
    if (expected_.empty()) last_progress_ = std::chrono::steady_clock::now();
    append(b, false);
  }
}

void write_pipeline::append(open_batch& b, bool eval) {
  if (out_sent_ == out_.size()) {
    stream_base_ += out_.size();
    out_.clear();
    out_sent_ = 0;
  }
  b.evaled = eval;
  if (asking_) {
    out_ += "*1\r\n$6\r\nASKING\r\n";
    expected_.push_back({&b, true});  // its +OK
  }
  out_ += eval ? b.batch->eval_head() : b.batch->head(write_sha(conn()));
  out_ += b.batch->tail();
  b.end = stream_base_ + out_.size();
  expected_.push_back({&b, false});
}

void write_pipeline::flush() {
  if (!connected()) return;
  while (out_sent_ < out_.size()) {
    const ssize_t n = ::send(conn().get()->fd, out_.data() + out_sent_, out_.size() - out_sent_,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_sent_ += static_cast<std::size_t>(n);
      last_progress_ = std::chrono::steady_clock::now();
      const std::uint64_t sent = stream_base_ + out_sent_;
      for (auto& b : open_)
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

void write_pipeline::read() {
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::recv(conn().get()->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      last_progress_ = std::chrono::steady_clock::now();
      if (redisReaderFeed(conn().get()->reader, buf, static_cast<std::size_t>(n)) != REDIS_OK) {
        on_lost(0, false, false, "bad reply from the server");
        return;
      }
      for (;;) {
        void* raw = nullptr;
        if (redisReaderGetReply(conn().get()->reader, &raw) != REDIS_OK) {
          on_lost(0, false, false, "bad reply from the server");
          return;
        }
        if (!raw) break;
        on_reply(static_cast<redisReply*>(raw));
        if (!connected()) return;
      }
      if (static_cast<std::size_t>(n) < sizeof buf) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    const int e = n == 0 ? 0 : errno;
    on_lost(e, n == 0, false, n == 0 ? "closed by the server" : std::strerror(e));
    return;
  }
}

void write_pipeline::on_reply(redisReply* raw) {
  const reply_ptr r(raw);
  if (expected_.empty()) {
    on_lost(0, false, false, "a reply nobody asked for");
    return;
  }
  const expected_reply e = expected_.front();
  expected_.pop_front();
  if (e.discard) return;
  open_batch& b = *e.batch;
  if (opts_.cluster) {
    const cluster_redirect redirect = parse_redirect(r.get());
    if (redirect.kind != cluster_redirect::none) {
      on_redirect(redirect);
      return;
    }
  }
  if (is_noscript(r.get()) && !b.evaled) {
    // The server lost the script: every open batch goes again as EVAL, in
    // order, and the replies still due for their first sending are dropped.
    log(log_level::warning, name_ + ": the server lost the write script (NOSCRIPT); sending " +
                                std::to_string(open_.size()) + " batch(es) again with EVAL");
    for (expected_reply& later : expected_) later.discard = true;
    for (auto& o : open_) append(*o, true);
    flush();
    return;
  }
  unstable_since_.reset();
  pause_ = std::chrono::milliseconds{10};
  boost::system::error_code ec;
  if (r->type == REDIS_REPLY_ERROR) {
    const redis_failure f = server_error("async write", r.get());
    log(log_level::error, name_ + ": " + f.message);
    ec = make_error_code(f.code);
  }
  complete(ec);
  if (ask_ && open_.empty()) {
    // Every batch an ASK sent to the importing node has its answer: an ASK
    // is good for the redirected commands only, so later batches go to the
    // slot's owner again (its MOVED, once the migration ends, says where).
    ask_ = nullptr;
    asking_ = false;
    cur_ = nullptr;
  }
}

// Pops the oldest open batch and calls its `done`.
void write_pipeline::complete(boost::system::error_code ec) {
  std::unique_ptr<open_batch> b = std::move(open_.front());
  open_.pop_front();
  try {
    b->done(ec);
  } catch (...) {
    log(log_level::error, name_ + ": an async_write completion threw; ignored");
  }
}

void write_pipeline::on_lost(int saved_errno, bool eof, bool timed_out, const std::string& why) {
  if (cur_) cur_->drop(timed_out);
  ask_ = nullptr;
  expected_.clear();
  const bool retryable = eof || saved_errno == ECONNRESET || saved_errno == EPIPE ||
                         saved_errno == ECONNABORTED || saved_errno == ENOTCONN;
  // Sent again only when none of the open batches may have run: one whose
  // every byte reached the socket may have run before the connection went,
  // and running it twice is not harmless in a cluster (another instance may
  // have run and removed the task it saved meanwhile). A server that closed
  // an idle connection is seen before a batch is sent on it (start_fresh()).
  bool retried = false, maybe_ran = false;
  for (auto& b : open_) {
    retried = retried || b->retried;
    maybe_ran = maybe_ran || b->maybe_applied;
  }
  if (retryable && !retried && !maybe_ran) {
    log(log_level::warning, name_ + ": write connection lost (" + why + "); reconnecting and " +
                                "sending " + std::to_string(open_.size()) + " batch(es) again");
    if (resend_all(true)) return;
  }
  fail_open(why, timed_out);
}

// Dials the node the batches go to: the one an ASK named, else the owner of
// the slot (the only node without cluster mode). Throws redis_failure.
void write_pipeline::dial() {
  cur_ = ask_ ? ask_ : &router_.owner(slot_);
  asking_ = ask_ != nullptr;
  try {
    cur_->ensure_connected();
  } catch (const redis_failure& f) {
    // A master that cannot be reached may have failed over, and a dead one
    // never answers MOVED: read the slot map again and dial the slot's new
    // owner, if it has one (as cluster_router::try_run does).
    if (!opts_.cluster || ask_ || f.code != errc::store_unavailable) throw;
    connection* now = nullptr;
    try {
      router_.refresh();
      now = &router_.owner(slot_);
    } catch (const redis_failure&) {
    }
    if (!now || now == cur_) throw;
    cur_ = now;
    cur_->ensure_connected();
  }
}

bool write_pipeline::resend_all(bool retry) {
  try {
    dial();
  } catch (const redis_failure& f) {
    log(log_level::error, name_ + ": " + f.message);
    return false;
  }
  out_.clear();
  out_sent_ = 0;
  stream_base_ = 0;
  last_progress_ = std::chrono::steady_clock::now();
  for (auto& b : open_) {
    if (retry) b->retried = true;
    append(*b, b->evaled);
  }
  flush();
  return true;
}

// The oldest open batch got a redirect (or TRYAGAIN / CLUSTERDOWN): it did
// not run (after TRYAGAIN / CLUSTERDOWN a later one may have: see the header).
void write_pipeline::on_redirect(const cluster_redirect& r) {
  // Every open batch goes again, on a connection of its node: a copy the
  // old node has not received yet must never reach it later (after the
  // resend, where it would run after newer writes if it still serves the
  // slot), so the connection is reset, not closed gently.
  cur_->drop(false, true);
  expected_.clear();
  open_batch& b = *open_.front();
  if (r.kind == cluster_redirect::retry) {
    const auto now = std::chrono::steady_clock::now();
    if (!unstable_since_) unstable_since_ = now;
    if (now - *unstable_since_ >= opts_.command_timeout) {
      fail_open("the cluster kept answering '" + r.text + "'", false);
      return;
    }
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::milliseconds{200});
  } else {
    if (++b.redirects > cluster_router::max_redirects) {
      log(log_level::error, name_ + ": async write failed: more than " +
                                std::to_string(cluster_router::max_redirects) +
                                " cluster redirects (last: '" + r.text + "')");
      complete(make_error_code(errc::store_error));
      if (open_.empty()) return;
    }
    if (r.kind == cluster_redirect::moved) {
      ask_ = nullptr;
      router_.moved(r.slot, r.host, r.port);
    } else {
      try {
        ask_ = &router_.node(r.host, r.port);
      } catch (const redis_failure& f) {
        fail_open(f.message, false);
        return;
      }
    }
  }
  log(log_level::info,
      name_ + ": '" + r.text + "': sending " + std::to_string(open_.size()) + " batch(es) again");
  if (!resend_all(false)) fail_open("cannot reach the node after '" + r.text + "'", false);
}

void write_pipeline::fail_open(const std::string& why, bool timed_out) {
  if (cur_) cur_->drop(false);
  ask_ = nullptr;
  unstable_since_.reset();
  expected_.clear();
  out_.clear();
  out_sent_ = 0;
  stream_base_ = 0;
  log(log_level::error, name_ + ": write connection to " +
                            (cur_ ? cur_->options().address() : opts_.address()) + " dropped (" +
                            why + "); failing " + std::to_string(open_.size()) + " open batch(es)");
  while (!open_.empty()) {
    // A batch whose every byte reached the socket may have run, whether the
    // answer then timed out or the connection was lost (the server may have
    // applied it, and fsynced it, just before it died): outcome_unknown, as
    // the store contract asks. Only a batch not wholly sent is known not to
    // have run (Redis never runs an incomplete command).
    (void)timed_out;
    const bool unknown = open_.front()->maybe_applied;
    complete(make_error_code(unknown ? errc::outcome_unknown : errc::store_unavailable));
  }
}

}  // namespace delayq::detail::redis
