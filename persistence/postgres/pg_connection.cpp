// persistence/postgres/pg_connection.cpp - see pg_connection.hpp.
#include "pg_connection.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "delayq/log.hpp"

namespace delayq::detail::pg {
namespace {

using steady = std::chrono::steady_clock;

// Type oids (pg_type.dat): fixed in every PostgreSQL.
constexpr Oid oid_bool = 16;
constexpr Oid oid_bytea = 17;
constexpr Oid oid_int8 = 20;
constexpr Oid oid_int2 = 21;
constexpr Oid oid_int4 = 23;
constexpr Oid oid_text = 25;
constexpr Oid oid_int4_array = 1007;
constexpr Oid oid_text_array = 1009;
constexpr Oid oid_bytea_array = 1001;
constexpr Oid oid_int8_array = 1016;

std::string trimmed(const char* text) {
  std::string s = text ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A login the server refused (wrong password, no such role or database, not
// allowed by pg_hba.conf): someone has to look. libpq reports a failed
// connection without a SQLSTATE, so the message decides.
bool refused_login(const std::string& message) {
  for (const char* text :
       {"authentication failed", "pg_hba.conf", "does not exist", "permission denied", "password",
        "SSL is not enabled", "server does not support SSL"})
    if (message.find(text) != std::string::npos) return true;
  return false;
}

// Cancel requests under way, each on its thread: a server that stays
// paused holds them all, so past this many a timeout sends none (its
// connection is closed with a reset all the same).
std::atomic<int> cancels_running{0};
constexpr int max_cancels_running = 4;

// Sends `cancel` and frees it, on a thread of its own: PQcancel dials the
// server and then waits until the server closes that dial (libpq's
// internal_cancel), for as long as a paused server or a dropped link lasts.
// Returns false when none was sent (too many under way, or no thread).
bool cancel_aside(PGcancel* cancel) noexcept {
  if (cancels_running.fetch_add(1) >= max_cancels_running) {
    cancels_running.fetch_sub(1);
    PQfreeCancel(cancel);
    return false;
  }
  try {
    std::thread([cancel] {
      // libpq sends the request without MSG_NOSIGNAL: a dial reset before
      // it would raise SIGPIPE, which ends a process that does not ignore
      // it (the store leaves that to its user). Blocked on this thread, the
      // send fails with EPIPE instead.
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
      char buf[256];
      PQcancel(cancel, buf, sizeof buf);
      PQfreeCancel(cancel);
      cancels_running.fetch_sub(1);
    }).detach();
  } catch (...) {  // no thread to be had: no cancel
    cancels_running.fetch_sub(1);
    PQfreeCancel(cancel);
    return false;
  }
  return true;
}

}  // namespace

errc sqlstate_errc(std::string_view s) noexcept {
  if (s.size() != 5) return errc::store_error;
  const std::string_view cls = s.substr(0, 2);
  // Connection trouble and a server going away: the same call may work later.
  if (cls == "08") return errc::store_unavailable;
  if (s == "57P01" || s == "57P02" || s == "57P03" || s == "57014") return errc::store_unavailable;
  // Too many connections; a lock or serialization conflict that outlasted
  // the store's retries; lock_timeout.
  if (s == "53300" || s == "40001" || s == "40P01" || s == "55P03") return errc::store_unavailable;
  // Everything else needs someone to look: a full disk (53100), a read-only
  // server (25006), permissions (42501), a missing table (42P01), ...
  return errc::store_error;
}

// ---- params ---------------------------------------------------------------

void put_be64(std::string& out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_be32(std::string& out, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_be16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}
std::uint64_t read_be64(const char* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint32_t read_be32(const char* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint16_t read_be16(const char* p) noexcept {
  return static_cast<std::uint16_t>((static_cast<unsigned char>(p[0]) << 8) |
                                    static_cast<unsigned char>(p[1]));
}

params& params::add(const char* p, std::size_t n, Oid type) {
  if (n > static_cast<std::size_t>(INT32_MAX))
    throw pg_failure{errc::store_error, "a parameter exceeds 2 GiB"};
  // libpq takes a null pointer for SQL NULL: an empty value needs a pointer.
  values_.push_back(p ? p : "");
  lengths_.push_back(static_cast<int>(n));
  formats_.push_back(1);
  types_.push_back(type);
  return *this;
}

params& params::own(std::string bytes, Oid type) {
  owned_.push_back(std::move(bytes));
  return add(owned_.back().data(), owned_.back().size(), type);
}

params& params::boolean(bool v) { return own(std::string(1, v ? '\1' : '\0'), oid_bool); }
params& params::null_bytea() {
  values_.push_back(nullptr);
  lengths_.push_back(0);
  formats_.push_back(1);
  types_.push_back(oid_bytea);
  return *this;
}
params& params::bytea(std::string_view v) { return add(v.data(), v.size(), oid_bytea); }
params& params::text(std::string_view v) { return add(v.data(), v.size(), oid_text); }
params& params::int8(std::int64_t v) {
  std::string b;
  put_be64(b, static_cast<std::uint64_t>(v));
  return own(std::move(b), oid_int8);
}
params& params::int4(std::int32_t v) {
  std::string b;
  put_be32(b, static_cast<std::uint32_t>(v));
  return own(std::move(b), oid_int4);
}
params& params::int2(std::int16_t v) {
  std::string b;
  put_be16(b, static_cast<std::uint16_t>(v));
  return own(std::move(b), oid_int2);
}

// The binary array format (array_send): ndim, has-nulls flag, element type,
// then per dimension its length and lower bound, then each element as a
// 4-byte length and its bytes.
template <class Elem, class Put>
params& params::array(std::span<const Elem> v, Oid elem_type, Oid array_type, Put put) {
  std::string b;
  if (v.empty()) {
    // An empty array has no dimensions.
    put_be32(b, 0);
    put_be32(b, 0);
    put_be32(b, elem_type);
    return own(std::move(b), array_type);
  }
  put_be32(b, 1);
  put_be32(b, 0);
  put_be32(b, elem_type);
  put_be32(b, static_cast<std::uint32_t>(v.size()));
  put_be32(b, 1);
  for (const Elem& e : v) put(b, e);
  return own(std::move(b), array_type);
}

params& params::bytea_array(std::span<const std::string_view> v) {
  return array(v, oid_bytea, oid_bytea_array, [](std::string& b, std::string_view e) {
    if (e.size() > static_cast<std::size_t>(INT32_MAX))
      throw pg_failure{errc::store_error, "a value exceeds 2 GiB"};
    put_be32(b, static_cast<std::uint32_t>(e.size()));
    b.append(e);
  });
}
params& params::text_array(std::span<const std::string_view> v) {
  return array(v, oid_text, oid_text_array, [](std::string& b, std::string_view e) {
    put_be32(b, static_cast<std::uint32_t>(e.size()));
    b.append(e);
  });
}
params& params::int8_array(std::span<const std::int64_t> v) {
  return array(v, oid_int8, oid_int8_array, [](std::string& b, std::int64_t e) {
    put_be32(b, 8);
    put_be64(b, static_cast<std::uint64_t>(e));
  });
}
params& params::int4_array(std::span<const std::int32_t> v) {
  return array(v, oid_int4, oid_int4_array, [](std::string& b, std::int32_t e) {
    put_be32(b, 4);
    put_be32(b, static_cast<std::uint32_t>(e));
  });
}

std::int64_t get_int8(const PGresult* r, int row, int col) {
  if (PQgetlength(r, row, col) != 8) throw pg_failure{errc::store_error, "expected an int8"};
  return static_cast<std::int64_t>(read_be64(PQgetvalue(r, row, col)));
}
std::int32_t get_int4(const PGresult* r, int row, int col) {
  if (PQgetlength(r, row, col) != 4) throw pg_failure{errc::store_error, "expected an int4"};
  return static_cast<std::int32_t>(read_be32(PQgetvalue(r, row, col)));
}
std::string_view get_bytes(const PGresult* r, int row, int col) {
  return {PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col))};
}
bool is_null(const PGresult* r, int row, int col) { return PQgetisnull(r, row, col) != 0; }

std::string quote_ident(std::string_view name) {
  std::string out = "\"";
  for (const char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// ---- connection -----------------------------------------------------------

connection::connection(const postgres_connection_options& options, std::string log_name,
                       std::string app_name)
    : opts_(options), name_(std::move(log_name)), app_name_(std::move(app_name)) {}

connection::~connection() { close(); }

void connection::close() noexcept {
  if (!conn_) return;
  PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
}

void connection::abandon() noexcept {
  if (!conn_) return;
  // A cancel request stops what the server still runs for us (a write it
  // has not committed yet rolls back; one it has, stays).
  if (PGcancel* cancel = PQgetCancel(conn_); cancel && !cancel_aside(cancel)) {
    try {
      log(log_level::warning,
          name_ + ": no cancel request sent for a connection given up on (" +
              std::to_string(max_cancels_running) +
              " in this process wait for their server already, or no thread could be "
              "started): what it runs there goes on");
    } catch (...) {  // noexcept: a log line is not worth a terminate
    }
  }
  // Closed with a reset: the kernel drops what the server has not received
  // yet, which a gentle close would send on once the link heals (a
  // transaction committed after its caller was told the outcome is
  // unknown, and after writes made since on a new connection).
  if (const int fd = PQsocket(conn_); fd >= 0) {
    const ::linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  }
  close();
}

bool connection::alive() noexcept {
  if (!conn_) return false;
  // A server that ends a connection sends a FATAL error, then closes it:
  // read until nothing more is there (a few rounds at most), and take any
  // result arriving on an idle connection for that error.
  for (int round = 0; round < 4; ++round) {
    pollfd p{PQsocket(conn_), POLLIN, 0};
    if (p.fd < 0 || (::poll(&p, 1, 0) > 0 &&
                     (PQconsumeInput(conn_) != 1 || PQstatus(conn_) == CONNECTION_BAD))) {
      close();
      return false;
    }
    if (!PQisBusy(conn_)) {
      if (result_ptr unsolicited{PQgetResult(conn_)}) {
        close();
        return false;
      }
    }
    if ((p.revents & POLLIN) == 0) break;
  }
  return PQstatus(conn_) == CONNECTION_OK;
}

bool connection::wait_socket(bool out, steady::time_point deadline) {
  const int fd = PQsocket(conn_);
  if (fd < 0) return true;  // let the libpq call that follows report it
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, static_cast<short>(POLLIN | (out ? POLLOUT : 0)), 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the libpq call that follows reports it
  }
}

void connection::connect() {
  close();
  const std::string port = std::to_string(opts_.port);
  std::vector<const char*> keys, values;
  const auto set = [&](const char* k, const std::string& v) {
    if (v.empty()) return;
    keys.push_back(k);
    values.push_back(v.c_str());
  };
  // Keepalives: a server that vanished without closing the connection (a
  // power cut, a partition) is noticed by the listener, which only reads.
  static const std::string yes = "1", idle = "10", interval = "5", count = "3";
  set("host", opts_.host);
  set("port", port);
  set("user", opts_.user);
  set("password", opts_.password);
  set("dbname", opts_.database);
  set("sslmode", opts_.sslmode);
  set("application_name", app_name_);
  set("keepalives", yes);
  set("keepalives_idle", idle);
  set("keepalives_interval", interval);
  set("keepalives_count", count);
  keys.push_back(nullptr);
  values.push_back(nullptr);

  PGconn* c = PQconnectStartParams(keys.data(), values.data(), 0);
  if (!c) throw pg_failure{errc::store_unavailable, "out of memory", true};
  const auto fail = [&](errc code, const std::string& why) {
    PQfinish(c);
    throw pg_failure{code, "cannot connect to " + opts_.address() + ": " + why, true};
  };
  if (PQstatus(c) == CONNECTION_BAD) {
    const std::string why = trimmed(PQerrorMessage(c));
    fail(refused_login(why) ? errc::store_error : errc::store_unavailable, why);
  }
  const auto deadline = steady::now() + opts_.connect_timeout;
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  for (;;) {
    if (st == PGRES_POLLING_OK) break;
    if (st == PGRES_POLLING_FAILED) {
      const std::string why = trimmed(PQerrorMessage(c));
      fail(refused_login(why) ? errc::store_error : errc::store_unavailable, why);
    }
    const int fd = PQsocket(c);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now());
    if (left.count() <= 0 || fd < 0)
      fail(errc::store_unavailable,
           "timed out after " + std::to_string(opts_.connect_timeout.count()) + " ms");
    pollfd p{fd, static_cast<short>(st == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) fail(errc::store_unavailable, std::strerror(errno));
    if (n == 0) continue;  // the deadline check above ends it
    st = PQconnectPoll(c);
  }
  // Notices (CREATE ... IF NOT EXISTS found it there) would go to stderr.
  PQsetNoticeProcessor(
      c, [](void*, const char*) {}, nullptr);
  if (PQsetnonblocking(c, 1) != 0 || PQenterPipelineMode(c) != 1)
    fail(errc::store_error, trimmed(PQerrorMessage(c)));
  conn_ = c;
}

void connection::lost(const std::string& what, bool write, bool sent) {
  std::string why = conn_ ? trimmed(PQerrorMessage(conn_)) : std::string();
  close();
  pg_failure f{write && sent ? errc::outcome_unknown : errc::store_unavailable,
               name_ + ": " + what + ": connection lost" + (why.empty() ? "" : " (" + why + ")"),
               true};
  f.retryable = true;
  throw f;
}

std::vector<result_ptr> connection::exchange(std::span<const statement> stmts, bool write) {
  if (!conn_) connect();
  auto deadline = steady::now() + opts_.command_timeout;
  // What each result in the pipeline belongs to: a prepare (its name), or
  // a statement (its index).
  struct expect {
    std::string_view prepare;
    std::size_t index;
  };
  std::vector<expect> expected;
  bool sent = false;
  const auto timed_out = [&](const char* phase) {
    abandon();
    pg_failure f{write && sent ? errc::outcome_unknown : errc::store_unavailable,
                 name_ + ": no answer within " + std::to_string(opts_.command_timeout.count()) +
                     " ms while " + phase,
                 true};
    throw f;
  };

  for (std::size_t i = 0; i < stmts.size(); ++i) {
    const statement& s = stmts[i];
    const params& a = s.args;
    bool ok = true;
    if (!s.name.empty()) {
      const std::string name(s.name);
      // Prepared once: on this connection before, or earlier in this very
      // pipeline (a batch may run one statement several times).
      const bool here = std::any_of(expected.begin(), expected.end(),
                                    [&](const expect& e) { return e.prepare == s.name; });
      if (!here && !prepared_.contains(s.name)) {
        const std::string sql(s.sql);
        ok = PQsendPrepare(conn_, name.c_str(), sql.c_str(), a.size(), a.types()) == 1;
        expected.push_back({s.name, i});
      }
      ok = ok && PQsendQueryPrepared(conn_, name.c_str(), a.size(), a.values(), a.lengths(),
                                     a.formats(), 1) == 1;
    } else {
      const std::string sql(s.sql);
      ok = PQsendQueryParams(conn_, sql.c_str(), a.size(), a.types(), a.values(), a.lengths(),
                             a.formats(), 1) == 1;
    }
    if (!ok) lost("sending a statement", write, false);
    expected.push_back({{}, i});
  }
  if (PQpipelineSync(conn_) != 1) lost("sending a statement", write, false);
  // Flush everything; read what arrives meanwhile, so that neither side
  // blocks on a full socket buffer.
  for (;;) {
    const int f = PQflush(conn_);
    if (f == 0) break;
    if (f < 0) lost("sending", write, false);
    if (!wait_socket(true, deadline)) timed_out("sending");
    deadline = steady::now() + opts_.command_timeout;
    if (PQconsumeInput(conn_) != 1) lost("sending", write, false);
  }
  sent = true;

  std::vector<result_ptr> out(stmts.size());
  std::optional<pg_failure> first_error;
  std::size_t at = 0;  // the expected result being read
  bool have_result = false;
  for (;;) {
    while (PQisBusy(conn_)) {
      if (!wait_socket(false, deadline)) timed_out("waiting for the answer");
      deadline = steady::now() + opts_.command_timeout;
      if (PQconsumeInput(conn_) != 1) lost("reading the answer", write, true);
    }
    result_ptr r(PQgetResult(conn_));
    if (!r) {
      // The end of one query's results.
      if (at < expected.size()) {
        ++at;
        have_result = false;
        continue;
      }
      lost("reading the answer", write, true);  // should not happen
    }
    const ExecStatusType st = PQresultStatus(r.get());
    if (st == PGRES_PIPELINE_SYNC) break;
    if (at >= expected.size()) lost("reading the answer: an unexpected result", write, true);
    const expect& e = expected[at];
    if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
      if (!first_error) {
        const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
        pg_failure f{state ? sqlstate_errc(state) : errc::store_error,
                     name_ + ": " + trimmed(PQresultErrorMessage(r.get()))};
        if (state) f.sqlstate = state;
        first_error = std::move(f);
      }
    } else if (st == PGRES_PIPELINE_ABORTED) {
      // Skipped after an earlier error of this transaction.
    } else if (!e.prepare.empty()) {
      prepared_.emplace(e.prepare);
    } else if (!have_result) {
      out[e.index] = std::move(r);
      have_result = true;
    }
    if (PQstatus(conn_) == CONNECTION_BAD) lost("reading the answer", write, true);
  }
  if (PQstatus(conn_) == CONNECTION_BAD) lost("reading the answer", write, true);
  if (first_error) {
    // The server sends a FATAL error (57P01, ...) and closes: the connection
    // is gone, and with it whatever it was doing.
    if (PQstatus(conn_) == CONNECTION_BAD) close();
    throw *first_error;
  }
  return out;
}

// ---- COPY -----------------------------------------------------------------

void connection::start_copy(std::string_view sql) {
  if (!conn_) connect();
  if (PQexitPipelineMode(conn_) != 1) lost("leaving pipeline mode", false, false);
  const std::string text(sql);
  if (PQsendQueryParams(conn_, text.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 1) != 1)
    lost("starting a COPY", false, false);
  auto deadline = steady::now() + opts_.command_timeout;
  for (;;) {
    const int f = PQflush(conn_);
    if (f == 0) break;
    if (f < 0) lost("starting a COPY", false, false);
    if (!wait_socket(true, deadline)) {
      close();
      throw pg_failure{errc::store_unavailable, name_ + ": no answer to a COPY", true};
    }
  }
  for (;;) {
    while (PQisBusy(conn_)) {
      if (!wait_socket(false, deadline)) {
        close();
        throw pg_failure{errc::store_unavailable, name_ + ": no answer to a COPY", true};
      }
      if (PQconsumeInput(conn_) != 1) lost("starting a COPY", false, false);
    }
    result_ptr r(PQgetResult(conn_));
    if (!r) lost("starting a COPY", false, false);
    const ExecStatusType st = PQresultStatus(r.get());
    if (st == PGRES_COPY_OUT) return;
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    pg_failure f{state ? sqlstate_errc(state) : errc::store_error,
                 name_ + ": " + trimmed(PQresultErrorMessage(r.get()))};
    close();  // simpler than draining to a clean state: a list has its own
    throw f;
  }
}

bool connection::next_copy_row(char** buffer, int& length, steady::time_point& deadline) {
  for (;;) {
    const int n = PQgetCopyData(conn_, buffer, 1);
    if (n > 0) {
      length = n;
      deadline = steady::now() + opts_.command_timeout;
      return true;
    }
    if (n == -1) return false;  // done: the final result follows
    if (n == -2) lost("reading a COPY", false, false);
    // 0: nothing buffered yet
    if (!wait_socket(false, deadline)) {
      close();
      throw pg_failure{errc::store_unavailable,
                       name_ + ": no data for " + std::to_string(opts_.command_timeout.count()) +
                           " ms while reading a COPY",
                       true};
    }
    if (PQconsumeInput(conn_) != 1) lost("reading a COPY", false, false);
  }
}

void connection::end_copy() {
  auto deadline = steady::now() + opts_.command_timeout;
  std::optional<pg_failure> error;
  for (;;) {
    while (PQisBusy(conn_)) {
      if (!wait_socket(false, deadline)) {
        close();
        throw pg_failure{errc::store_unavailable, name_ + ": no end to a COPY", true};
      }
      if (PQconsumeInput(conn_) != 1) lost("ending a COPY", false, false);
    }
    result_ptr r(PQgetResult(conn_));
    if (!r) break;
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK && !error) {
      const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
      error = pg_failure{state ? sqlstate_errc(state) : errc::store_error,
                         name_ + ": " + trimmed(PQresultErrorMessage(r.get()))};
    }
  }
  if (error) {
    close();
    throw *error;
  }
  if (PQenterPipelineMode(conn_) != 1) lost("entering pipeline mode", false, false);
}

}  // namespace delayq::detail::pg
