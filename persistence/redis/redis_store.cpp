#include "delayq/redis_store.hpp"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <ctime>
#include <mutex>
#include <optional>
#include <unordered_set>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"

namespace delayq {
namespace {

// ---------------------------------------------------------------------------
// URI parsing

struct uri_error {
  std::string message;
};

constexpr std::string_view default_prefix = "delayq";

bool valid_prefix(std::string_view p) {
  if (p.empty() || p.size() > 64) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Echoes a piece of a URI in an error message only when it cannot be part of
// a misplaced password (a password holding '/', '?' or '@' unencoded splits
// the URI in odd places).
std::string shown(std::string_view v) {
  const bool plain = v.size() <= 32 && std::all_of(v.begin(), v.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                     });
  return plain ? "'" + std::string(v) + "'" : std::string("(not shown)");
}

std::string percent_decode(std::string_view s, const char* what) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= s.size()) throw uri_error{std::string("bad percent-encoding in ") + what};
    auto [p, e] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
    if (e != std::errc{} || p != s.data() + i + 3)
      throw uri_error{std::string("bad percent-encoding in ") + what};
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

template <class Int>
Int parse_number(std::string_view s, Int min, Int max, const char* what) {
  Int value{};
  auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || e != std::errc{} || p != s.data() + s.size() || value < min || value > max)
    throw uri_error{std::string(what) + " must be a number from " + std::to_string(min) + " to " +
                    std::to_string(max) + ", not " + shown(s)};
  return value;
}

void parse_userinfo(std::string_view info, redis_options& o) {
  const auto colon = info.find(':');
  if (colon == std::string_view::npos)
    throw uri_error{"credentials must be ':PASSWORD@' or 'USER:PASSWORD@'"};
  o.user = percent_decode(info.substr(0, colon), "the user name");
  o.password = percent_decode(info.substr(colon + 1), "the password");
  if (o.password.empty()) throw uri_error{"empty password"};
}

void parse_query(std::string_view query, redis_options& o, bool allow_db) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) throw uri_error{"option " + shown(item) + " has no value"};
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "prefix") {
      if (!valid_prefix(value))
        throw uri_error{"prefix must be 1-64 characters from [A-Za-z0-9._-]"};
      o.prefix = std::string(value);
    } else if (key == "connect_timeout_ms") {
      o.connect_timeout = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 1, 3'600'000, "connect_timeout_ms")};
    } else if (key == "command_timeout_ms") {
      o.command_timeout = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 1, 3'600'000, "command_timeout_ms")};
    } else if (key == "db" && allow_db) {
      o.db = parse_number<int>(value, 0, 1'000'000, "db");
    } else {
      throw uri_error{"unknown option " + shown(key)};
    }
  }
}

redis_options parse_uri(std::string_view uri) {
  redis_options o;
  std::string_view query;
  std::string_view rest;
  const bool is_unix = uri.starts_with("unix://");
  if (uri.starts_with("redis://"))
    rest = uri.substr(8);
  else if (is_unix)
    rest = uri.substr(7);
  else
    throw uri_error{"not a redis:// or unix:// URI"};
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }

  if (is_unix) {
    // unix://[userinfo@]/path
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) throw uri_error{"missing socket path"};
    const std::string_view before = rest.substr(0, slash);
    if (!before.empty()) {
      if (!before.ends_with('@')) throw uri_error{"the socket path must be absolute: unix:///PATH"};
      parse_userinfo(before.substr(0, before.size() - 1), o);
    }
    o.unix_socket = percent_decode(rest.substr(slash), "the socket path");
    if (o.unix_socket.size() < 2) throw uri_error{"missing socket path"};
    parse_query(query, o, true);
    return o;
  }

  // redis://[userinfo@]host[:port][/db]
  std::string_view authority = rest, path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    parse_userinfo(authority.substr(0, at), o);
    authority = authority.substr(at + 1);
  }
  std::string_view host = authority, port;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw uri_error{"unterminated '[' in the host"};
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') throw uri_error{"unexpected text after ']'"};
      port = after.substr(1);
      if (port.empty()) throw uri_error{"empty port"};
    }
  } else if (const auto colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) throw uri_error{"empty port"};
  }
  if (host.empty()) throw uri_error{"missing host"};
  o.host = std::string(host);
  if (!port.empty()) o.port = parse_number<unsigned>(port, 1, 65535, "the port");
  if (!path.empty()) o.db = parse_number<int>(path, 0, 1'000'000, "the database number");
  parse_query(query, o, false);
  return o;
}

// ---------------------------------------------------------------------------
// hiredis plumbing

struct context_deleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using context_ptr = std::unique_ptr<redisContext, context_deleter>;

struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// What went wrong inside one call. `lost` means the connection is unusable;
// `retryable` that it was found closed by the peer (not timed out), so one
// fresh connection may be tried within the same call.
struct redis_failure {
  errc code;
  std::string message;
  bool lost = false;
  bool retryable = false;
};

// hiredis writes with write(2): on a socket the server has closed, that
// raises SIGPIPE, whose default action kills the process. A library must not
// install a process-wide handler, so each call blocks SIGPIPE in its own
// thread and swallows any SIGPIPE it raised before unblocking (the technique
// libpq uses).
class sigpipe_guard {
 public:
  sigpipe_guard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~sigpipe_guard() {
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
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

struct append_failed {};

// One command as an argument vector of byte strings (binary-safe).
class command {
 public:
  command& arg(std::string_view a) {
    args_.push_back(a.data());
    lens_.push_back(a.size());
    return *this;
  }
  // Fails only when out of memory; the connection is then dropped, since
  // part of a pipeline may already sit in its buffer.
  void append_to(redisContext* c) {
    if (redisAppendCommandArgv(c, static_cast<int>(args_.size()), args_.data(), lens_.data()) !=
        REDIS_OK)
      throw append_failed{};
  }

 private:
  std::vector<const char*> args_;
  std::vector<std::size_t> lens_;
};

constexpr const char* quarantine_script =
    "local raw = redis.call('HGET', KEYS[1], ARGV[1]) "
    "if raw ~= ARGV[2] then return 0 end "
    "redis.call('HSET', KEYS[3], ARGV[1], raw) "
    "redis.call('HSET', KEYS[4], ARGV[1], ARGV[3]) "
    "redis.call('HDEL', KEYS[1], ARGV[1]) "
    "redis.call('ZREM', KEYS[2], ARGV[1]) "
    "return 1";

// Drops an id from a sorted set index when its hash holds no record for it
// (an index entry left behind by a hand edit or a partly applied
// transaction), so list_dead() does not meet it again.
constexpr const char* drop_dangling_script =
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end "
    "return redis.call('ZREM', KEYS[2], ARGV[1])";

std::string reply_text(const redisReply* r) {
  return r && r->str ? std::string(r->str, r->len) : std::string();
}

}  // namespace

// ---------------------------------------------------------------------------
// redis_options

redis_options redis_options::parse(std::string_view uri, boost::system::error_code& ec,
                                   std::string* message) {
  ec = {};
  try {
    return parse_uri(uri);
  } catch (const uri_error& e) {
    ec = make_error_code(errc::invalid_store_uri);
    if (message) *message = "invalid Redis URI: " + e.message;
    return {};
  }
}

redis_options redis_options::parse(std::string_view uri) {
  boost::system::error_code ec;
  std::string message;
  redis_options o = parse(uri, ec, &message);
  if (ec) throw boost::system::system_error(ec, "delayq: " + message);
  return o;
}

std::string redis_options::address() const {
  if (!unix_socket.empty()) return unix_socket;
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string redis_options::describe() const {
  std::string who;
  if (!user.empty()) {
    static constexpr char hex[] = "0123456789ABCDEF";
    for (const char ch : user) {
      const auto c = static_cast<unsigned char>(ch);
      if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
        who.push_back(ch);
      } else {
        who.push_back('%');
        who.push_back(hex[c >> 4]);
        who.push_back(hex[c & 15]);
      }
    }
    who.push_back('@');
  }
  std::string out;
  if (!unix_socket.empty()) {
    out = "unix://" + who + unix_socket + "?db=" + std::to_string(db);
    if (prefix != default_prefix) out += "&prefix=" + prefix;
  } else {
    out = "redis://" + who + address() + "/" + std::to_string(db);
    if (prefix != default_prefix) out += "?prefix=" + prefix;
  }
  return out;
}

// ---------------------------------------------------------------------------
// redis_store

struct redis_store::impl {
  redis_options opts;
  std::string name;  // describe(), computed once
  std::string key_tasks, key_due, key_quarantine, key_reason, key_meta;
  std::string key_dead, key_dead_by_time, key_dead_quarantine, key_dead_reason;
  std::mutex mutex;
  context_ptr ctx;
  bool connected_once = false;
  // Reconnect backoff: after a failed attempt, calls fail fast until
  // next_attempt, and the wait doubles up to max_backoff.
  static constexpr std::chrono::milliseconds min_backoff{100};
  static constexpr std::chrono::milliseconds max_backoff{5000};
  std::chrono::milliseconds backoff = min_backoff;
  std::chrono::steady_clock::time_point next_attempt{};

  explicit impl(redis_options o) : opts(std::move(o)) {
    name = opts.describe();
    const std::string tag = "{" + opts.prefix + "}:";
    key_tasks = tag + "tasks";
    key_due = tag + "due";
    key_quarantine = tag + "quarantine";
    key_reason = tag + "quarantine:reason";
    key_meta = tag + "meta";
    key_dead = tag + "dead";
    key_dead_by_time = tag + "dead:by_time";
    key_dead_quarantine = tag + "dead:quarantine";
    key_dead_reason = tag + "dead:quarantine:reason";
  }

  // The connection is unusable: describe why and whether one retry makes
  // sense (the peer closed it) or not (a timeout: retrying doubles the wait).
  [[noreturn]] void throw_lost(int saved_errno) {
    redisContext* c = ctx.get();
    std::string why = c && c->errstr[0] ? c->errstr : "connection error";
    bool retryable = false;
    if (c && c->err == REDIS_ERR_EOF) {
      retryable = true;
    } else if (c && c->err == REDIS_ERR_IO) {
      if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT)
        why = "no answer within " + std::to_string(opts.command_timeout.count()) + " ms";
      else
        retryable = saved_errno == ECONNRESET || saved_errno == EPIPE ||
                    saved_errno == ECONNABORTED || saved_errno == ENOTCONN;
    }
    ctx.reset();
    throw redis_failure{errc::store_unavailable,
                        "connection to " + opts.address() + " lost: " + why, true, retryable};
  }

  // Sends every appended command and reads `n` replies. Error replies are
  // returned like any other; a lost connection throws.
  std::vector<reply_ptr> read_replies(std::size_t n) {
    std::vector<reply_ptr> replies;
    replies.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      void* raw = nullptr;
      errno = 0;
      if (redisGetReply(ctx.get(), &raw) != REDIS_OK || raw == nullptr) throw_lost(errno);
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return replies;
  }

  std::vector<reply_ptr> exchange(std::vector<command> cmds) {
    for (command& c : cmds) c.append_to(ctx.get());
    return read_replies(cmds.size());
  }

  // An error reply. Most mean the store is misconfigured or full
  // (store_error); a few say the server is up but cannot serve for now
  // (loading its data set, a busy script, a cluster without quorum), which is
  // store_unavailable: the same call may succeed later without anyone acting.
  [[noreturn]] void throw_server_error(const std::string& what, const redisReply* r) {
    const std::string text = reply_text(r);
    bool transient = false;
    for (const char* code : {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"}) {
      const std::string word = std::string(code) + " ";
      if (text.starts_with(word) || text == code) transient = true;
    }
    throw redis_failure{transient ? errc::store_unavailable : errc::store_error,
                        what + ": server replied: " + text};
  }

  // Dials, authenticates, selects the database, names the connection (so
  // `CLIENT LIST` shows it) and checks the key layout version.
  void connect() {
    ctx.reset();
    const timeval connect_tv = to_timeval(opts.connect_timeout);
    context_ptr c(
        opts.unix_socket.empty()
            ? redisConnectWithTimeout(opts.host.c_str(), static_cast<int>(opts.port), connect_tv)
            : redisConnectUnixWithTimeout(opts.unix_socket.c_str(), connect_tv));
    if (!c) throw redis_failure{errc::store_unavailable, "out of memory for a Redis context"};
    if (c->err)
      throw redis_failure{errc::store_unavailable,
                          "cannot connect to " + opts.address() + ": " + c->errstr};
    redisSetTimeout(c.get(), to_timeval(opts.command_timeout));
    if (opts.unix_socket.empty()) redisEnableKeepAlive(c.get());
    ctx = std::move(c);

    std::vector<command> cmds;
    if (!opts.password.empty()) {
      command auth;
      auth.arg("AUTH");
      if (!opts.user.empty()) auth.arg(opts.user);
      auth.arg(opts.password);
      cmds.push_back(std::move(auth));
    }
    const std::string db = std::to_string(opts.db);
    const std::string client_name = "delayq:" + opts.prefix;
    const std::string layout = std::to_string(layout_version);
    if (opts.db != 0) cmds.push_back(std::move(command().arg("SELECT").arg(db)));
    cmds.push_back(std::move(command().arg("CLIENT").arg("SETNAME").arg(client_name)));
    cmds.push_back(std::move(command().arg("HSETNX").arg(key_meta).arg("layout").arg(layout)));
    cmds.push_back(std::move(command().arg("HGET").arg(key_meta).arg("layout")));
    std::vector<reply_ptr> replies;
    try {
      replies = exchange(std::move(cmds));
    } catch (const append_failed&) {
      ctx.reset();
      throw redis_failure{errc::store_error, "out of memory while buffering commands"};
    }
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (replies[i]->type != REDIS_REPLY_ERROR) continue;
      const bool auth = !opts.password.empty() && i == 0;
      ctx.reset();
      throw_server_error(auth ? "authentication failed" : "connection setup failed",
                         replies[i].get());
    }
    const std::string stored = reply_text(replies.back().get());
    int stored_layout = 0;
    std::from_chars(stored.data(), stored.data() + stored.size(), stored_layout);
    if (stored_layout != layout_version) {
      ctx.reset();
      throw redis_failure{errc::store_error, "key layout version '" + stored + "' in " + key_meta +
                                                 " is not " + layout + ", the one this build uses"};
    }
  }

  void ensure_connected() {
    if (ctx) return;
    const auto now = std::chrono::steady_clock::now();
    if (connected_once && now < next_attempt) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt - now).count();
      throw redis_failure{errc::store_unavailable, "not connected to " + opts.address() +
                                                       "; next reconnect attempt in " +
                                                       std::to_string(wait) + " ms"};
    }
    try {
      connect();
    } catch (const redis_failure& f) {
      if (connected_once) {
        next_attempt = std::chrono::steady_clock::now() + backoff;
        log(log_level::warning, name + ": reconnect failed: " + f.message + "; next attempt in " +
                                    std::to_string(backoff.count()) + " ms");
        backoff = std::min(backoff * 2, max_backoff);
      }
      throw;
    }
    if (connected_once) log(log_level::warning, name + ": reconnected to " + opts.address());
    connected_once = true;
    backoff = min_backoff;
  }

  // Runs `body` on a live connection; on a connection the server had closed,
  // reconnects once and runs it again. Translates failures into `ec`.
  template <class Body>
  void run(const char* what, boost::system::error_code& ec, Body&& body) {
    ec = {};
    sigpipe_guard guard;
    for (int attempt = 0;; ++attempt) {
      try {
        try {
          ensure_connected();
          body();
          return;
        } catch (const append_failed&) {
          ctx.reset();
          throw redis_failure{errc::store_error, "out of memory while buffering commands", true};
        }
      } catch (const redis_failure& f) {
        if (f.retryable && attempt == 0) {
          log(log_level::warning, name + ": " + f.message + "; reconnecting");
          continue;
        }
        ec = make_error_code(f.code);
        log(log_level::error, name + ": " + what + " failed: " + f.message);
        return;
      }
    }
  }

  // Checks the replies of MULTI, n queued commands and EXEC.
  void check_transaction(const std::vector<reply_ptr>& replies, const char* what) {
    for (std::size_t i = 0; i + 1 < replies.size(); ++i)
      if (replies[i]->type == REDIS_REPLY_ERROR) throw_server_error(what, replies[i].get());
    const redisReply* exec = replies.back().get();
    if (exec->type == REDIS_REPLY_ERROR) throw_server_error(what, exec);
    if (exec->type != REDIS_REPLY_ARRAY)
      throw redis_failure{errc::store_error, std::string(what) + ": transaction aborted"};
    for (std::size_t i = 0; i < exec->elements; ++i)
      if (exec->element[i]->type == REDIS_REPLY_ERROR)
        throw_server_error(std::string(what) + " (partly applied: Redis does not roll back)",
                           exec->element[i]);
  }

  // A record that failed to decode, as read from `hash`.
  struct bad_record {
    std::string_view id;
    std::string_view raw;
    std::string why;
  };

  // Moves each bad record from `hash` (and its id from the sorted set
  // `index`) into the quarantine hashes `q` and `q_reason`: one script per
  // record, atomic, and only if the field still holds the bytes that were
  // read (another process may have written a good record since). Returns how
  // many moved; logs each one as "quarantined undecodable KIND 'ID'".
  std::size_t quarantine(const std::string& hash, const std::string& index, const std::string& q,
                         const std::string& q_reason, const std::vector<bad_record>& bad,
                         const char* kind) {
    if (bad.empty()) return 0;
    std::vector<command> cmds;
    cmds.reserve(bad.size());
    for (const bad_record& b : bad)
      cmds.push_back(std::move(command()
                                   .arg("EVAL")
                                   .arg(quarantine_script)
                                   .arg("4")
                                   .arg(hash)
                                   .arg(index)
                                   .arg(q)
                                   .arg(q_reason)
                                   .arg(b.id)
                                   .arg(b.raw)
                                   .arg(b.why)));
    auto moved = exchange(std::move(cmds));
    std::size_t n = 0;
    for (std::size_t k = 0; k < bad.size(); ++k) {
      const redisReply* r = moved[k].get();
      if (r->type == REDIS_REPLY_ERROR) throw_server_error("quarantine", r);
      if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        ++n;
        log(log_level::error, name + ": quarantined undecodable " + kind + " '" +
                                  std::string(bad[k].id) + "' in " + q + ": " + bad[k].why);
      }
    }
    return n;
  }

  // Decodes a dead-letter record read under `id`; a record filed under
  // another id is as corrupt as one that does not decode.
  static std::optional<dead_letter> decode_dead(std::string_view id, std::string_view raw,
                                                std::string& why) {
    boost::system::error_code dec;
    dead_letter d = decode_dead_letter(raw, dec, &why);
    if (dec) return std::nullopt;
    if (d.task.id != id) {
      why = "record holds id '" + d.task.id + "'";
      return std::nullopt;
    }
    return d;
  }

  // MULTI, `hdel` and `zrem` (the ids leaving one area), then HSET and ZADD
  // of each record into the other area, EXEC: one round trip, one
  // transaction.
  void move_between(const char* what, const std::string& from_hash, const std::string& from_index,
                    const std::string& to_hash, const std::string& to_index,
                    const std::vector<std::string_view>& ids,
                    const std::vector<std::string>& records,
                    const std::vector<std::string>& scores) {
    command hdel, zrem;
    hdel.arg("HDEL").arg(from_hash);
    zrem.arg("ZREM").arg(from_index);
    for (std::string_view id : ids) {
      hdel.arg(id);
      zrem.arg(id);
    }
    redisContext* c = ctx.get();
    command().arg("MULTI").append_to(c);
    hdel.append_to(c);
    zrem.append_to(c);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      command().arg("HSET").arg(to_hash).arg(ids[i]).arg(records[i]).append_to(c);
      command().arg("ZADD").arg(to_index).arg(scores[i]).arg(ids[i]).append_to(c);
    }
    command().arg("EXEC").append_to(c);
    check_transaction(read_replies(2 * ids.size() + 4), what);
  }
};

redis_store::redis_store(std::unique_ptr<impl> m) : impl_(std::move(m)) {}

redis_store::redis_store(redis_options options)
    : impl_(std::make_unique<impl>(std::move(options))) {
  sigpipe_guard guard;
  try {
    impl_->ensure_connected();
  } catch (const redis_failure& f) {
    throw boost::system::system_error(make_error_code(f.code),
                                      "delayq: " + impl_->name + ": " + f.message);
  }
}

std::unique_ptr<redis_store> redis_store::open(redis_options options, boost::system::error_code& ec,
                                               std::string* message) {
  ec = {};
  auto m = std::make_unique<impl>(std::move(options));
  sigpipe_guard guard;
  try {
    m->ensure_connected();
  } catch (const redis_failure& f) {
    ec = make_error_code(f.code);
    if (message) *message = f.message;
    return nullptr;
  }
  return std::unique_ptr<redis_store>(new redis_store(std::move(m)));
}

redis_store::~redis_store() = default;

std::string redis_store::describe() const { return impl_->name; }

const redis_options& redis_store::options() const noexcept { return impl_->opts; }

void redis_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  if (tasks.empty()) return;
  impl& m = *impl_;
  // Encoded once, outside the retry loop; hiredis copies the bytes when the
  // commands are appended.
  std::vector<std::string> records;
  std::vector<std::string> scores;
  records.reserve(tasks.size());
  scores.reserve(tasks.size());
  for (const task& t : tasks) {
    records.push_back(encode_task(t));
    scores.push_back(std::to_string(to_epoch_ms(t.due)));
  }
  std::lock_guard lock(m.mutex);
  m.run("save", ec, [&] {
    redisContext* c = m.ctx.get();
    command().arg("MULTI").append_to(c);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      command().arg("HSET").arg(m.key_tasks).arg(tasks[i].id).arg(records[i]).append_to(c);
      command().arg("ZADD").arg(m.key_due).arg(scores[i]).arg(tasks[i].id).append_to(c);
    }
    command().arg("EXEC").append_to(c);
    m.check_transaction(m.read_replies(2 * tasks.size() + 2), "save");
  });
}

void redis_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  if (ids.empty()) return;
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.run("remove", ec, [&] {
    command hdel, zrem;
    hdel.arg("HDEL").arg(m.key_tasks);
    zrem.arg("ZREM").arg(m.key_due);
    for (const std::string& id : ids) {
      hdel.arg(id);
      zrem.arg(id);
    }
    redisContext* c = m.ctx.get();
    command().arg("MULTI").append_to(c);
    hdel.append_to(c);
    zrem.append_to(c);
    command().arg("EXEC").append_to(c);
    m.check_transaction(m.read_replies(4), "remove");
  });
}

list_summary redis_store::list(const std::function<void(task&&)>& sink,
                               boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  list_summary summary;
  // HSCAN may return an element more than once; the ids handed over are
  // remembered so the sink sees each task once. That set is the only state
  // list() keeps that grows with the store (ids, not records).
  std::unordered_set<std::string> seen;
  std::string cursor = "0";
  std::vector<task> good;
  do {
    good.clear();
    std::string next_cursor;
    {
      std::lock_guard lock(m.mutex);
      m.run("list", ec, [&] {
        good.clear();
        auto replies = m.exchange(
            {command().arg("HSCAN").arg(m.key_tasks).arg(cursor).arg("COUNT").arg("1000")});
        const redisReply* r = replies[0].get();
        if (r->type == REDIS_REPLY_ERROR) m.throw_server_error("HSCAN", r);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[1]->type != REDIS_REPLY_ARRAY || r->element[1]->elements % 2 != 0)
          throw redis_failure{errc::store_error, "unexpected HSCAN reply"};
        next_cursor = reply_text(r->element[0]);
        const redisReply* items = r->element[1];

        std::vector<impl::bad_record> bad;
        for (std::size_t i = 0; i < items->elements; i += 2) {
          const std::string_view id(items->element[i]->str, items->element[i]->len);
          const std::string_view raw(items->element[i + 1]->str, items->element[i + 1]->len);
          boost::system::error_code dec;
          std::string why;
          task t = decode_task(raw, dec, &why);
          if (!dec && t.id != id) {
            dec = make_error_code(errc::corrupt_record);
            why = "record holds id '" + t.id + "'";
          }
          if (dec)
            bad.push_back({id, raw, std::move(why)});
          else
            good.push_back(std::move(t));
        }
        summary.quarantined += m.quarantine(m.key_tasks, m.key_due, m.key_quarantine, m.key_reason,
                                            bad, "record of task");
      });
    }
    if (ec) break;
    cursor = next_cursor;
    for (task& t : good) {
      if (!seen.insert(t.id).second) continue;
      ++summary.tasks;
      sink(std::move(t));
    }
  } while (cursor != "0");
  return summary;
}

void redis_store::bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
  ec = {};
  if (letters.empty()) return;
  impl& m = *impl_;
  std::vector<std::string_view> ids;
  std::vector<std::string> records, scores;
  ids.reserve(letters.size());
  records.reserve(letters.size());
  scores.reserve(letters.size());
  for (const dead_letter& d : letters) {
    ids.push_back(d.task.id);
    records.push_back(encode_dead_letter(d));
    scores.push_back(std::to_string(to_epoch_ms(d.died_at)));
  }
  std::lock_guard lock(m.mutex);
  m.run("bury", ec, [&] {
    m.move_between("bury", m.key_tasks, m.key_due, m.key_dead, m.key_dead_by_time, ids, records,
                   scores);
  });
}

void redis_store::revive(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  if (tasks.empty()) return;
  impl& m = *impl_;
  std::vector<std::string_view> ids;
  std::vector<std::string> records, scores;
  ids.reserve(tasks.size());
  records.reserve(tasks.size());
  scores.reserve(tasks.size());
  for (const task& t : tasks) {
    ids.push_back(t.id);
    records.push_back(encode_task(t));
    scores.push_back(std::to_string(to_epoch_ms(t.due)));
  }
  std::lock_guard lock(m.mutex);
  m.run("revive", ec, [&] {
    m.move_between("revive", m.key_dead, m.key_dead_by_time, m.key_tasks, m.key_due, ids, records,
                   scores);
  });
}

void redis_store::purge(std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  if (ids.empty()) return;
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.run("purge", ec, [&] {
    command hdel, zrem;
    hdel.arg("HDEL").arg(m.key_dead);
    zrem.arg("ZREM").arg(m.key_dead_by_time);
    for (const std::string& id : ids) {
      hdel.arg(id);
      zrem.arg(id);
    }
    redisContext* c = m.ctx.get();
    command().arg("MULTI").append_to(c);
    hdel.append_to(c);
    zrem.append_to(c);
    command().arg("EXEC").append_to(c);
    m.check_transaction(m.read_replies(4), "purge");
  });
}

std::size_t redis_store::count_dead(boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  std::size_t n = 0;
  std::lock_guard lock(m.mutex);
  m.run("count_dead", ec, [&] {
    auto replies = m.exchange({command().arg("HLEN").arg(m.key_dead)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) m.throw_server_error("HLEN", r);
    if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
      throw redis_failure{errc::store_error, "unexpected HLEN reply"};
    n = static_cast<std::size_t>(r->integer);
  });
  return n;
}

std::optional<dead_letter> redis_store::find_dead(std::string_view id,
                                                  boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  std::optional<dead_letter> found;
  std::lock_guard lock(m.mutex);
  m.run("find_dead", ec, [&] {
    found.reset();
    auto replies = m.exchange({command().arg("HGET").arg(m.key_dead).arg(id)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) m.throw_server_error("HGET", r);
    if (r->type == REDIS_REPLY_NIL) return;
    if (r->type != REDIS_REPLY_STRING)
      throw redis_failure{errc::store_error, "unexpected HGET reply"};
    const std::string_view raw(r->str, r->len);
    std::string why;
    found = impl::decode_dead(id, raw, why);
    if (!found)
      m.quarantine(m.key_dead, m.key_dead_by_time, m.key_dead_quarantine, m.key_dead_reason,
                   {{id, raw, std::move(why)}}, "dead-letter record of task");
  });
  if (ec) found.reset();
  return found;
}

std::vector<dead_letter> redis_store::list_dead(std::size_t offset, std::size_t limit,
                                                boost::system::error_code& ec) {
  ec = {};
  std::vector<dead_letter> out;
  // ZRANGE takes signed 64-bit ranks; no sorted set holds LLONG_MAX members.
  constexpr auto max_rank = static_cast<unsigned long long>(LLONG_MAX);
  if (limit == 0 || offset > max_rank) return out;
  const std::string start = std::to_string(offset);
  // The last rank, or -1 ("to the end") when offset + limit - 1 passes it.
  const std::string stop =
      limit - 1 > max_rank - offset ? std::string("-1") : std::to_string(offset + limit - 1);
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.run("list_dead", ec, [&] {
    while (true) {
      out.clear();
      auto ranged =
          m.exchange({command().arg("ZRANGE").arg(m.key_dead_by_time).arg(start).arg(stop)});
      const redisReply* ids = ranged[0].get();
      if (ids->type == REDIS_REPLY_ERROR) m.throw_server_error("ZRANGE", ids);
      if (ids->type != REDIS_REPLY_ARRAY)
        throw redis_failure{errc::store_error, "unexpected ZRANGE reply"};
      if (ids->elements == 0) return;
      command hmget;
      hmget.arg("HMGET").arg(m.key_dead);
      for (std::size_t i = 0; i < ids->elements; ++i)
        hmget.arg({ids->element[i]->str, ids->element[i]->len});
      auto fetched = m.exchange({std::move(hmget)});
      const redisReply* records = fetched[0].get();
      if (records->type == REDIS_REPLY_ERROR) m.throw_server_error("HMGET", records);
      if (records->type != REDIS_REPLY_ARRAY || records->elements != ids->elements)
        throw redis_failure{errc::store_error, "unexpected HMGET reply"};

      std::vector<impl::bad_record> bad;
      std::vector<std::string_view> dangling;
      out.reserve(ids->elements);
      for (std::size_t i = 0; i < ids->elements; ++i) {
        const std::string_view id(ids->element[i]->str, ids->element[i]->len);
        const redisReply* rec = records->element[i];
        if (rec->type != REDIS_REPLY_STRING) {
          dangling.push_back(id);  // purged since the ZRANGE, or an index left behind
          continue;
        }
        const std::string_view raw(rec->str, rec->len);
        std::string why;
        if (auto d = impl::decode_dead(id, raw, why))
          out.push_back(std::move(*d));
        else
          bad.push_back({id, raw, std::move(why)});
      }
      if (bad.empty() && dangling.empty()) return;
      std::size_t changed = m.quarantine(m.key_dead, m.key_dead_by_time, m.key_dead_quarantine,
                                         m.key_dead_reason, bad, "dead-letter record of task");
      if (!dangling.empty()) {
        std::vector<command> cmds;
        for (std::string_view id : dangling)
          cmds.push_back(std::move(command()
                                       .arg("EVAL")
                                       .arg(drop_dangling_script)
                                       .arg("2")
                                       .arg(m.key_dead)
                                       .arg(m.key_dead_by_time)
                                       .arg(id)));
        auto dropped = m.exchange(std::move(cmds));
        for (std::size_t k = 0; k < dropped.size(); ++k) {
          const redisReply* r = dropped[k].get();
          if (r->type == REDIS_REPLY_ERROR) m.throw_server_error("drop index entry", r);
          if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
            ++changed;
            log(log_level::warning, m.name + ": dropped '" + std::string(dangling[k]) + "' from " +
                                        m.key_dead_by_time + ": no record in " + m.key_dead);
          }
        }
      }
      // Removing members shifted the ranks after them: read the page again
      // so that it, and the pages after it, skip no good letter. Every pass
      // that gets here removed at least one member, so this ends.
      if (changed == 0) return;
    }
  });
  if (ec) out.clear();
  return out;
}

}  // namespace delayq
