// persistence/postgres/pg_listener.cpp - shard_store::listen() of the
// PostgreSQL store: LISTEN on the schema's channel, on a connection of its
// own. wait() polls the socket and an eventfd together, so close() from
// another thread wakes it at once; libpq only parses what wait() read
// (PQconsumeInput once poll says the socket is readable, then PQnotifies),
// so no call blocks past the deadline. A broken connection makes wait()
// return errc::store_unavailable (notices sent meanwhile are lost: the
// engine then reads its shards again), and the next wait() dials and
// LISTENs again.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>

#include "delayq/log.hpp"
#include "pg_shards.hpp"

namespace delayq::detail::pg {

bool parse_notices(std::string_view payload, std::vector<task_notice>& out) {
  bool all = true;
  while (!payload.empty()) {
    const auto nl = payload.find('\n');
    const std::string_view line = payload.substr(0, nl);
    payload = nl == std::string_view::npos ? std::string_view{} : payload.substr(nl + 1);
    task_notice n;
    if (line.starts_with("s ")) {
      n.kind = notice_kind::setting;
      if (!percent_decode(line.substr(2), n.id) || n.id.empty()) {
        all = false;
        continue;
      }
      out.push_back(std::move(n));
      continue;
    }
    // "t SHARD DUE_MS ID"
    if (!line.starts_with("t ")) {
      all = false;
      continue;
    }
    const std::string_view rest = line.substr(2);
    const auto sp1 = rest.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : rest.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos) {
      all = false;
      continue;
    }
    const char* b = rest.data();
    if (std::from_chars(b, b + sp1, n.shard).ptr != b + sp1 ||
        std::from_chars(b + sp1 + 1, b + sp2, n.due_ms).ptr != b + sp2 ||
        !percent_decode(rest.substr(sp2 + 1), n.id) || n.id.empty()) {
      all = false;
      continue;
    }
    out.push_back(std::move(n));
  }
  return all;
}

namespace {

// Thread safety: as task_listener: wait() from one thread at a time (it alone
// touches the connection); close() from any thread (an atomic flag and a
// write to the eventfd).
class pg_listener final : public task_listener {
 public:
  explicit pg_listener(const postgres_options& options)
      : sql_(options.layout.schema),
        name_(options.describe() + " listener"),
        conn_(options.connection, name_, "delayq:" + options.layout.schema + ":listen") {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    listen_sql_ = "LISTEN " + quote_ident(sql_.channel);
  }
  ~pg_listener() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }
  pg_listener(const pg_listener&) = delete;
  pg_listener& operator=(const pg_listener&) = delete;

  // Connects and LISTENs; throws pg_failure.
  void subscribe() {
    conn_.connect();
    statement s{{}, listen_sql_, {}};
    conn_.exchange(std::span{&s, 1}, false);
  }

  std::vector<task_notice> wait(std::chrono::milliseconds timeout,
                                boost::system::error_code& ec) override {
    ec = {};
    std::vector<task_notice> out;
    if (closed_) {
      ec = errc::not_running;
      return out;
    }
    if (!conn_.connected()) {
      try {
        subscribe();
      } catch (const pg_failure& f) {
        ec = make_error_code(errc::store_unavailable);
        log(log_level::warning, name_ + ": " + f.message);
        return out;
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      // Notices libpq has buffered already.
      drain(out);
      if (!out.empty()) return out;
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {PQsocket(conn_.get()), POLLIN, 0}};
      const int n = ::poll(fds, 2, static_cast<int>(left.count()));
      if (closed_) {
        ec = errc::not_running;
        return {};
      }
      if (n < 0 && errno != EINTR) {
        ec = lost("poll failed");
        return {};
      }
      if (n > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        if (PQconsumeInput(conn_.get()) != 1 || PQstatus(conn_.get()) == CONNECTION_BAD) {
          ec = lost(PQerrorMessage(conn_.get()));
          return {};
        }
      }
    }
  }

  void close() noexcept override {
    closed_ = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }

 private:
  void drain(std::vector<task_notice>& out) {
    while (PGnotify* n = PQnotifies(conn_.get())) {
      const std::string_view payload = n->extra ? n->extra : "";
      if (!parse_notices(payload, out))
        log(log_level::warning, name_ + ": skipped a malformed notice");
      PQfreemem(n);
    }
  }

  boost::system::error_code lost(const char* why) {
    std::string text = why ? why : "";
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    log(log_level::warning, name_ + ": the connection was lost (" + text +
                                "); notices sent "
                                "meanwhile are missed, the next wait dials again");
    conn_.close();
    return make_error_code(errc::store_unavailable);
  }

  schema_sql sql_;
  std::string name_;
  std::string listen_sql_;
  connection conn_;
  int wake_fd_ = -1;
  std::atomic<bool> closed_{false};
};

}  // namespace

std::unique_ptr<task_listener> make_pg_listener(const postgres_options& options,
                                                boost::system::error_code& ec) {
  ec = {};
  auto l = std::make_unique<pg_listener>(options);
  try {
    l->subscribe();
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::error, f.message + " (listen)");
    return nullptr;
  }
  return l;
}

}  // namespace delayq::detail::pg
