// persistence/redis/connection.cpp - dialling, the handshake, timeouts and
// error mapping of one connection (see connection.hpp).
#include "connection.hpp"

#include <hiredis/sds.h>

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <ctime>

#include "delayq/log.hpp"
#include "link_probe.hpp"

namespace delayq::detail::redis {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// The run_id line of an INFO server reply: ids of clients are unique within
// one run of a server only.
std::string run_id_of(const std::string& info) {
  const auto at = info.find("run_id:");
  if (at == std::string::npos) return {};
  const auto end = info.find_first_of("\r\n", at);
  return info.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
}

bool parse_unsigned(std::string_view s, unsigned& out) {
  const auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && e == std::errc{} && p == s.data() + s.size();
}

// "HOST:PORT", the host possibly an IPv6 address (the last ':' splits).
bool split_address(std::string_view a, std::string& host, unsigned& port) {
  const auto colon = a.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  host = std::string(a.substr(0, colon));
  return parse_unsigned(a.substr(colon + 1), port) && port > 0 && port < 65536;
}

}  // namespace

sigpipe_guard::sigpipe_guard() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

sigpipe_guard::~sigpipe_guard() {
  if (!was_pending_) {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void command::append_to(redisContext* c) const {
  // hiredis 0.14 takes `const char**` although it does not write through it.
  if (redisAppendCommandArgv(c, static_cast<int>(args_.size()),
                             const_cast<const char**>(args_.data()), lens_.data()) != REDIS_OK)
    throw append_failed{};
}

std::string reply_text(const redisReply* r) {
  return r && r->str ? std::string(r->str, r->len) : std::string();
}

redis_failure server_error(const std::string& what, const redisReply* r) {
  const std::string text = reply_text(r);
  bool transient = false;
  for (const char* code : {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"}) {
    const std::string word = std::string(code) + " ";
    if (text.starts_with(word) || text == code) transient = true;
  }
  return redis_failure{transient ? errc::store_unavailable : errc::store_error,
                       what + ": server replied: " + text};
}

void throw_server_error(const std::string& what, const redisReply* r) {
  throw server_error(what, r);
}

bool is_noscript(const redisReply* r) {
  return r && r->type == REDIS_REPLY_ERROR && r->str &&
         std::string_view(r->str, r->len).starts_with("NOSCRIPT");
}

cluster_redirect parse_redirect(const redisReply* r) {
  cluster_redirect out;
  if (!r || r->type != REDIS_REPLY_ERROR || !r->str) return out;
  const std::string_view text(r->str, r->len);
  if (text.starts_with("TRYAGAIN") || text.starts_with("CLUSTERDOWN")) {
    out.kind = cluster_redirect::retry;
    out.text = std::string(text);
    return out;
  }
  cluster_redirect::kind_t kind;
  std::string_view rest;
  if (text.starts_with("MOVED ")) {
    kind = cluster_redirect::moved;
    rest = text.substr(6);
  } else if (text.starts_with("ASK ")) {
    kind = cluster_redirect::ask;
    rest = text.substr(4);
  } else {
    return out;
  }
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) return out;
  unsigned slot = 0;
  if (!parse_unsigned(rest.substr(0, space), slot) || slot >= cluster_slots) return out;
  if (!split_address(rest.substr(space + 1), out.host, out.port)) return out;
  out.kind = kind;
  out.slot = slot;
  out.text = std::string(text);
  return out;
}

std::string client_name_for(const redis_key_layout& layout, std::string_view role) {
  std::string out = "delayq:" + layout.prefix;
  out += role;
  return out;
}

connection::connection(const redis_connection_options& opts, std::string store_name,
                       std::string client_name,
                       std::shared_ptr<const handshake_extension> extension)
    : opts_(opts),
      name_(std::move(store_name)),
      client_name_(std::move(client_name)),
      extension_(std::move(extension)) {}

const std::string& connection::script_sha(std::size_t i) const noexcept {
  static const std::string none;
  return i < script_shas_.size() ? script_shas_[i] : none;
}

void connection::drop(bool timed_out, bool withdraw) noexcept {
  if (timed_out && client_id_ >= 0) {
    kill_id_ = client_id_;
    kill_run_id_ = run_id_;
  }
  // A connection given up on closes with a reset: the kernel drops what
  // the server has not received yet. A gentle close would have it sent on
  // once the link is back, a script run after its caller was told the
  // outcome is unknown and after writes made since on a new connection;
  // CLIENT KILL (above) only reaches what the server already holds.
  if ((timed_out || withdraw) && ctx_ && ctx_->fd >= 0) {
    const ::linger reset{1, 0};
    ::setsockopt(ctx_->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  }
  ctx_.reset();
  client_id_ = -1;
}

redis_failure connection::lost(int saved_errno, bool write) {
  redisContext* c = ctx_.get();
  std::string why = c && c->errstr[0] ? c->errstr : "connection error";
  bool retryable = false;
  bool timed_out = false;
  // hiredis sends what it buffered before it reads: an empty write buffer
  // means every byte of the call reached the socket, and the server may
  // have run it.
  const bool all_sent = c != nullptr && (c->obuf == nullptr || sdslen(c->obuf) == 0);
  if (c && c->err == REDIS_ERR_EOF) {
    retryable = true;
  } else if (c && c->err == REDIS_ERR_IO) {
    if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT) {
      timed_out = true;
      why = "no answer within " + std::to_string(opts_.command_timeout.count()) + " ms";
    } else {
      retryable = saved_errno == ECONNRESET || saved_errno == EPIPE ||
                  saved_errno == ECONNABORTED || saved_errno == ENOTCONN;
    }
  }
  drop(timed_out);
  // A write sent whole and then lost with its connection may have run: it
  // is not run again (in a cluster another instance may have acted on it
  // meanwhile: issue 33, a task saved, run and removed came back), and its
  // outcome is unknown.
  if (write && all_sent && !timed_out)
    return redis_failure{errc::outcome_unknown,
                         "connection to " + opts_.address() + " lost: " + why +
                             " after the write was sent; it may or may not be applied",
                         true, false};
  if (timed_out) return gave_up(why, write);
  return redis_failure{errc::store_unavailable,
                       "connection to " + opts_.address() + " lost: " + why, true, retryable};
}

redis_failure connection::gave_up(const std::string& why, bool write) {
  drop(true);
  if (write)
    return redis_failure{errc::outcome_unknown,
                         "connection to " + opts_.address() + " dropped: " + why +
                             "; the write may or may not be applied",
                         true, false};
  return redis_failure{errc::store_unavailable,
                       "connection to " + opts_.address() + " dropped: " + why, true, false};
}

// Waits until the socket has something to read (or an error to report),
// at most command_timeout, checking the link once the reply is late by
// link_check (link_probe.hpp). Throws gave_up() when either says stop.
void connection::await_readable(bool write) {
  using steady = std::chrono::steady_clock;
  const auto start = steady::now();
  const auto deadline = start + opts_.command_timeout;
  auto next_check = start + opts_.link_check;
  link_probe probe;
  for (;;) {
    auto now = steady::now();
    if (probe.running()) {
      switch (probe.check(now)) {
        case link_probe::result::unreachable:
          throw gave_up(
              "no answer for " +
                  std::to_string(
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count()) +
                  " ms, and a new connection failed: " + probe.why(),
              write);
        case link_probe::result::reachable: next_check = now + opts_.link_check; break;
        case link_probe::result::pending: break;
      }
    } else if (opts_.link_check.count() > 0 && now >= next_check) {
      probe.start(opts_);
      continue;  // a dial that failed at once is decided above
    }
    if (now >= deadline)
      throw gave_up("no answer within " + std::to_string(opts_.command_timeout.count()) + " ms",
                    write);
    auto wake = deadline;
    if (probe.running()) {
      wake = std::min(wake, probe.deadline());
    } else if (opts_.link_check.count() > 0) {
      wake = std::min(wake, next_check);
    }
    pollfd fds[2] = {{ctx_->fd, POLLIN, 0}, {probe.fd(), POLLOUT, 0}};
    const int ms = static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(std::max(wake - now, steady::duration{}))
            .count());
    const int n = ::poll(fds, probe.fd() >= 0 ? 2 : 1, ms);
    if (n < 0 && errno != EINTR) throw lost(errno, write);
    if (n > 0 && fds[0].revents != 0) return;  // the read says what came
  }
}

std::vector<reply_ptr> connection::read_replies(std::size_t n, bool write) {
  std::vector<reply_ptr> replies;
  replies.reserve(n);
  // redisGetReply()'s blocking loop, with a wait that checks the link
  // before each read.
  const auto read_one = [&] {
    redisContext* c = ctx_.get();
    void* raw = nullptr;
    errno = 0;
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK) throw lost(errno, write);
    if (raw == nullptr) {
      int done = 0;
      do {
        errno = 0;
        if (redisBufferWrite(c, &done) != REDIS_OK) throw lost(errno, write);
      } while (!done);
      do {
        await_readable(write);
        errno = 0;
        if (redisBufferRead(c) != REDIS_OK) throw lost(errno, write);
        if (redisGetReplyFromReader(c, &raw) != REDIS_OK) throw lost(errno, write);
      } while (raw == nullptr);
    }
    return reply_ptr(static_cast<redisReply*>(raw));
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (asking_) read_one();  // the ASKING before it: OK, or an error the command repeats
    replies.push_back(read_one());
  }
  if (opts_.cluster) {
    // Every reply is read first, so the connection stays usable.
    for (const reply_ptr& r : replies) {
      cluster_redirect redirect = parse_redirect(r.get());
      if (redirect.kind != cluster_redirect::none) throw redirect;
    }
  }
  return replies;
}

std::vector<reply_ptr> connection::exchange(const std::vector<command>& cmds, bool write) {
  for (const command& c : cmds) append(c);
  return read_replies(cmds.size(), write);
}

namespace {
const command asking_command = std::move(command().arg("ASKING"));
}  // namespace

void connection::append(const command& cmd) {
  if (asking_) asking_command.append_to(ctx_.get());
  cmd.append_to(ctx_.get());
}

void connection::append_formatted(std::string_view bytes, bool starts_command) {
  if (asking_ && starts_command) asking_command.append_to(ctx_.get());
  if (redisAppendFormattedCommand(ctx_.get(), bytes.data(), bytes.size()) != REDIS_OK)
    throw append_failed{};
}

// Dials, authenticates, selects the database, names the connection (so
// `CLIENT LIST` shows it), runs the extension's part (loads its scripts,
// sends its check) and kills a connection that timed out before.
void connection::connect() {
  ctx_.reset();
  const timeval connect_tv = to_timeval(opts_.connect_timeout);
  context_ptr c(
      opts_.unix_socket.empty()
          ? redisConnectWithTimeout(opts_.host.c_str(), static_cast<int>(opts_.port), connect_tv)
          : redisConnectUnixWithTimeout(opts_.unix_socket.c_str(), connect_tv));
  if (!c) throw redis_failure{errc::store_unavailable, "out of memory for a Redis context"};
  if (c->err)
    throw redis_failure{errc::store_unavailable,
                        "cannot connect to " + opts_.address() + ": " + c->errstr};
  redisSetTimeout(c.get(), to_timeval(opts_.command_timeout));
  if (opts_.unix_socket.empty()) redisEnableKeepAlive(c.get());
  ctx_ = std::move(c);

  std::vector<command> cmds;
  if (!opts_.password.empty()) {
    command auth;
    auth.arg("AUTH");
    if (!opts_.user.empty()) auth.arg(opts_.user);
    auth.arg(opts_.password);
    cmds.push_back(std::move(auth));
  }
  const std::string db = std::to_string(opts_.db);
  if (opts_.db != 0 && !opts_.cluster) cmds.push_back(std::move(command().arg("SELECT").arg(db)));
  cmds.push_back(std::move(command().arg("CLIENT").arg("SETNAME").arg(client_name_)));
  cmds.push_back(std::move(command().arg("CLIENT").arg("ID")));
  cmds.push_back(std::move(command().arg("INFO").arg("server")));
  const std::size_t first_optional = cmds.size();
  const std::span<const char* const> scripts =
      extension_ ? extension_->scripts() : std::span<const char* const>{};
  for (const char* script : scripts)
    cmds.push_back(std::move(command().arg("SCRIPT").arg("LOAD").arg(script)));
  command check;
  const bool checked = extension_ && extension_->check_command(check);
  if (checked) cmds.push_back(std::move(check));
  std::vector<reply_ptr> replies;
  try {
    replies = exchange(cmds);
  } catch (const append_failed&) {
    ctx_.reset();
    throw redis_failure{errc::store_error, "out of memory while buffering commands"};
  }
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (replies[i]->type != REDIS_REPLY_ERROR) continue;
    // INFO only serves the kill after a timeout: a user may lack the right.
    if (i + 1 == first_optional) continue;
    const bool auth = !opts_.password.empty() && i == 0;
    ctx_.reset();
    throw_server_error(auth ? "authentication failed" : "connection setup failed",
                       replies[i].get());
  }
  std::size_t k = first_optional - 2;
  client_id_ = replies[k]->type == REDIS_REPLY_INTEGER ? replies[k]->integer : -1;
  run_id_ = run_id_of(reply_text(replies[k + 1].get()));
  ++k;
  if (kill_id_ >= 0) {
    // Only on the server run the old id belongs to: ids start again at a
    // restart, and this must never kill someone else's connection. The
    // connection may be gone already, and a user without the right to
    // CLIENT KILL gets an error: both are fine.
    const std::string kill = std::to_string(kill_id_);
    if (!run_id_.empty() && run_id_ == kill_run_id_) {
      auto killed = exchange({command().arg("CLIENT").arg("KILL").arg("ID").arg(kill)});
      if (killed[0]->type == REDIS_REPLY_INTEGER && killed[0]->integer == 1)
        log(log_level::warning, name_ + ": killed the connection that timed out (client id " +
                                    kill + ") before it could run what it still held");
    }
    kill_id_ = -1;
  }
  script_shas_.clear();
  for (std::size_t i = 0; i < scripts.size(); ++i)
    script_shas_.push_back(reply_text(replies[++k].get()));
  if (!checked) return;
  try {
    extension_->check_reply(replies.back().get());
  } catch (const redis_failure&) {
    ctx_.reset();
    throw;
  }
}

void connection::ensure_connected() {
  // A connection the server closed while idle (a restart, CLIENT KILL, its
  // timeout) is dialled anew before a call goes out on it: a write sent into
  // it would otherwise be lost with it after all its bytes were sent, and so
  // count as maybe run (lost()).
  if (ctx_ && ctx_->fd >= 0) {
    char c = 0;
    const ssize_t n = ::recv(ctx_->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      log_reconnecting("the server closed the connection");
      drop(false);
    }
  }
  if (ctx_) return;
  const auto now = std::chrono::steady_clock::now();
  if (connected_once_ && now < next_attempt_) {
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt_ - now).count();
    throw redis_failure{errc::store_unavailable, "not connected to " + opts_.address() +
                                                     "; next reconnect attempt in " +
                                                     std::to_string(wait) + " ms"};
  }
  try {
    connect();
  } catch (const redis_failure& f) {
    if (connected_once_) {
      next_attempt_ = std::chrono::steady_clock::now() + backoff_;
      log(log_level::warning, name_ + ": reconnect failed: " + f.message + "; next attempt in " +
                                  std::to_string(backoff_.count()) + " ms");
      backoff_ = std::min(backoff_ * 2, max_backoff);
    }
    throw;
  }
  if (connected_once_) log(log_level::warning, name_ + ": reconnected to " + opts_.address());
  connected_once_ = true;
  backoff_ = min_backoff;
}

void connection::log_reconnecting(const std::string& why) const {
  log(log_level::warning, name_ + ": " + why + "; reconnecting");
}

void connection::log_failed(const char* what, const std::string& why) const {
  log(log_level::error, name_ + ": " + what + " failed: " + why);
}

}  // namespace delayq::detail::redis
