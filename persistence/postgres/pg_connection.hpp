// persistence/postgres/pg_connection.hpp - one libpq connection in pipeline
// mode, the binary parameters and results of its statements, and the
// mapping of libpq's failures onto delayq::errc. Internal.
//
// Every call is an exchange: its statements go out in one pipeline,
// followed by one Sync, so they run as one implicit transaction (committed at
// the Sync, rolled back whole when one fails) in one round trip; the
// exchange returns once the Sync's answer came back, that is after COMMIT.
// A connection knows no table of the store: the SQL comes from its callers
// (pg_schema.hpp names the tables).
//
// A failure is thrown as pg_failure. What it means:
// - an error the server answered for a statement (a SQLSTATE): the
//   transaction was rolled back, nothing of it landed; mapped by class
//   (sqlstate_errc()). The connection stays usable.
// - the connection broke (EOF, reset, the server shut down): `lost` and
//   `retryable`: the pool runs the call once more on a fresh connection. A
//   write sent whole is errc::outcome_unknown (the server may have committed
//   it just before), one not sent whole errc::store_unavailable.
// - no progress for command_timeout: for a read errc::store_unavailable, for
//   a write sent whole errc::outcome_unknown; the connection is cancelled
//   (a cancel request stops what the server still runs for it) and dropped.
#pragma once

#include <utility>

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/error.hpp"
#include "delayq/postgres_store.hpp"

namespace delayq::detail::pg {

/// What went wrong in one exchange. `lost`: the connection is unusable;
/// `retryable`: it broke (not a timeout), so one fresh connection may be
/// tried within the same call (every call of the store may run twice).
struct pg_failure {
  errc code;
  std::string message;
  bool lost = false;
  bool retryable = false;
  std::string sqlstate;  // empty when the server did not send one
};

/// The errc a SQLSTATE stands for (docs/persistence.md, "PostgreSQL").
errc sqlstate_errc(std::string_view sqlstate) noexcept;

struct result_deleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using result_ptr = std::unique_ptr<PGresult, result_deleter>;

/// Binary parameters of one statement. Scalars and arrays are encoded into
/// buffers it owns; bytea() and text() point at the caller's bytes, which
/// must stay valid until the exchange returns.
class params {
 public:
  // Move-only: the pointers handed to libpq point into `owned_`, whose
  // strings stay where they are when the deque moves, not when it is
  // copied. (Without this, a std::vector<statement> growing would copy:
  // std::deque's move is not noexcept.)
  params() = default;
  params(const params&) = delete;
  params& operator=(const params&) = delete;
  params(params&&) = default;
  params& operator=(params&&) = default;

  params& bytea(std::string_view v);
  params& text(std::string_view v);
  params& int8(std::int64_t v);
  params& int4(std::int32_t v);
  params& int2(std::int16_t v);
  params& boolean(bool v);
  /// SQL NULL of type bytea.
  params& null_bytea();
  /// One-dimensional arrays (element types bytea, int8, int4, text).
  params& bytea_array(std::span<const std::string_view> v);
  params& text_array(std::span<const std::string_view> v);
  params& int8_array(std::span<const std::int64_t> v);
  params& int4_array(std::span<const std::int32_t> v);

  int size() const noexcept { return static_cast<int>(values_.size()); }
  const char* const* values() const noexcept { return values_.data(); }
  const int* lengths() const noexcept { return lengths_.data(); }
  const int* formats() const noexcept { return formats_.data(); }
  const Oid* types() const noexcept { return types_.data(); }

 private:
  params& add(const char* p, std::size_t n, Oid type);
  params& own(std::string bytes, Oid type);
  template <class Elem, class Put>
  params& array(std::span<const Elem> v, Oid elem_type, Oid array_type, Put put);

  std::deque<std::string> owned_;  // a deque: its strings never move
  std::vector<const char*> values_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
  std::vector<Oid> types_;
};

/// One statement of an exchange: SQL with $n parameters, prepared once per
/// connection under `name` when it has one (so the server parses and plans
/// it once), else parsed each time. Results come back in binary.
struct statement {
  std::string_view name;
  std::string_view sql;
  params args;
};

/// Reading binary results.
std::int64_t get_int8(const PGresult* r, int row, int col);
std::int32_t get_int4(const PGresult* r, int row, int col);
std::string_view get_bytes(const PGresult* r, int row, int col);
bool is_null(const PGresult* r, int row, int col);

/// Writes big-endian integers (the binary wire format).
void put_be64(std::string& out, std::uint64_t v);
void put_be32(std::string& out, std::uint32_t v);
void put_be16(std::string& out, std::uint16_t v);
std::uint64_t read_be64(const char* p) noexcept;
std::uint32_t read_be32(const char* p) noexcept;
std::uint16_t read_be16(const char* p) noexcept;

/// Thread safety: none; one thread at a time (the pool hands a connection to
/// one caller).
class connection {
 public:
  /// `log_name` names the store in log lines and errors; `app_name` is the
  /// connection's application_name (pg_stat_activity shows it).
  connection(const postgres_connection_options& options, std::string log_name,
             std::string app_name);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Dials within connect_timeout and enters pipeline mode. Throws
  /// pg_failure (errc::store_unavailable; errc::store_error when the server
  /// refused the login: a password, a missing database or role).
  void connect();
  bool connected() const noexcept { return conn_ != nullptr; }
  /// Whether an idle connection is still usable: reads what the server sent
  /// meanwhile without waiting, and drops the connection when the server
  /// closed it.
  bool alive() noexcept;
  /// Drops the connection (a later connect() dials again).
  void close() noexcept;
  /// Drops a connection given up on while the server may still hold work
  /// of it (a timeout): asks the server to cancel what it runs for it, on a
  /// thread of its own (libpq's PQcancel dials and waits until the server
  /// closes that dial: a paused server or a dropped link would hold the
  /// caller past command_timeout), and closes with a reset, so the kernel
  /// drops what the server has not received yet rather than send it on
  /// once a link heals (docs/persistence.md).
  void abandon() noexcept;

  /// Runs `stmts` as one transaction (see the top) and returns one result
  /// per statement. `write`: how a lost or timed-out exchange is reported
  /// (see pg_failure). Throws pg_failure.
  std::vector<result_ptr> exchange(std::span<const statement> stmts, bool write);

  /// Streams `sql` (a COPY ... TO STDOUT) row by row to `row`, each the
  /// bytes libpq hands out (valid during the call). Leaves pipeline mode for
  /// it and enters it again after. A failure in `row` (an exception) drops
  /// the connection and goes through. Throws pg_failure.
  template <class Row>
  void copy_out(std::string_view sql, Row&& row);

  /// The libpq connection (null when not connected), for waiting on its
  /// socket and reading notifications (the listener).
  PGconn* get() noexcept { return conn_; }
  const std::string& log_name() const noexcept { return name_; }
  const postgres_connection_options& options() const noexcept { return opts_; }

  /// Throws the failure a broken connection means: `write` and `sent` as in
  /// pg_failure. Drops the connection.
  [[noreturn]] void lost(const std::string& what, bool write, bool sent);
  /// Waits until the socket is readable (`out`: or writable), at most until
  /// `deadline`; false when the time ran out.
  bool wait_socket(bool out, std::chrono::steady_clock::time_point deadline);

 private:
  void start_copy(std::string_view sql);
  // One row of a COPY; false at its end. Throws pg_failure.
  bool next_copy_row(char** buffer, int& length, std::chrono::steady_clock::time_point& deadline);
  void end_copy();

  postgres_connection_options opts_;
  std::string name_;
  std::string app_name_;
  PGconn* conn_ = nullptr;
  std::set<std::string, std::less<>> prepared_;  // statement names prepared on conn_
};

template <class Row>
void connection::copy_out(std::string_view sql, Row&& row) {
  start_copy(sql);
  auto deadline = std::chrono::steady_clock::now() + opts_.command_timeout;
  char* buffer = nullptr;
  int length = 0;
  try {
    while (next_copy_row(&buffer, length, deadline)) {
      struct freer {
        char* p;
        ~freer() { PQfreemem(p); }
      } guard{buffer};
      row(std::string_view(buffer, static_cast<std::size_t>(length)));
    }
  } catch (const pg_failure&) {
    throw;
  } catch (...) {
    // The copy cannot be stopped midway on this connection: drop it.
    close();
    throw;
  }
  end_copy();
}

/// Quotes an identifier: "name" with '"' doubled.
std::string quote_ident(std::string_view name);

}  // namespace delayq::detail::pg
