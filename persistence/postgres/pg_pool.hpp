// persistence/postgres/pg_pool.hpp - the connections the PostgreSQL store's
// calls share, with the reconnect backoff. Internal.
//
// A call takes an idle connection (or dials one, up to `pool` of them;
// beyond that it waits for one to come back), runs its exchange, and gives
// it back. A connection that failed is dropped instead, and so are the idle
// ones dialled before it (after a server restart they are all broken): the
// next call dials afresh. A read that found its connection broken before
// any answer runs once more on a fresh one; a write is not sent twice by the
// pool (the caller knows whether that is safe).
//
// When dialling fails, calls fail at once with errc::store_unavailable for a
// backoff of 100 ms, doubling up to 5 s, reset by the next success, and each
// failed dial is logged at warning level (never with the password).
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pg_connection.hpp"

namespace delayq::detail::pg {

/// Thread safety: every member may be called from any thread.
class pool {
 public:
  pool(const postgres_connection_options& options, std::string log_name, std::string app_name);
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  /// Runs `body(connection&)` on a pooled connection (see the top). A
  /// pg_failure becomes `ec` (and a log line, error level for a server's
  /// error, warning for a lost connection), with `what` naming the call.
  /// `write`: never run twice. Other exceptions go through (the connection
  /// is dropped).
  void run(const char* what, bool write, boost::system::error_code& ec,
           const std::function<void(connection&)>& body);

  /// A fresh connection of the pool's settings, dialled now (for a list(),
  /// the listener, a lease table: they keep one of their own). Throws
  /// pg_failure; obeys the backoff.
  std::unique_ptr<connection> dial(const std::string& suffix);

  /// Notes a dial that failed or worked (the backoff). For connections made
  /// elsewhere (the write pipeline).
  void dial_failed(const pg_failure& f);
  void dial_worked();
  /// Throws errc::store_unavailable while the backoff runs.
  void check_backoff();

  const std::string& log_name() const noexcept { return name_; }
  const postgres_connection_options& options() const noexcept { return opts_; }

 private:
  std::unique_ptr<connection> take();
  void give_back(std::unique_ptr<connection> c, bool broken, std::uint64_t generation);

  postgres_connection_options opts_;
  std::string name_;
  std::string app_name_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<std::unique_ptr<connection>, std::uint64_t>> idle_;  // with generation
  std::size_t out_ = 0;           // connections handed out now
  std::uint64_t generation_ = 0;  // bumped by every broken connection
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
};

}  // namespace delayq::detail::pg
