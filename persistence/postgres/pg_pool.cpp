// persistence/postgres/pg_pool.cpp - see pg_pool.hpp.
#include "pg_pool.hpp"

#include <algorithm>
#include <optional>

#include "delayq/log.hpp"

namespace delayq::detail::pg {
namespace {

using steady = std::chrono::steady_clock;

constexpr std::chrono::milliseconds first_backoff{100};
constexpr std::chrono::milliseconds max_backoff{5000};

}  // namespace

pool::pool(const postgres_connection_options& options, std::string log_name, std::string app_name)
    : opts_(options), name_(std::move(log_name)), app_name_(std::move(app_name)) {}

pool::~pool() = default;

void pool::check_backoff() {
  std::lock_guard lock(mutex_);
  if (backoff_.count() > 0 && steady::now() < retry_at_)
    throw pg_failure{errc::store_unavailable,
                     name_ + ": " + opts_.address() +
                         " was unreachable moments ago; not dialling again yet (backoff)"};
}

void pool::dial_failed(const pg_failure& f) {
  {
    std::lock_guard lock(mutex_);
    backoff_ = backoff_.count() == 0 ? first_backoff : std::min(backoff_ * 2, max_backoff);
    retry_at_ = steady::now() + backoff_;
    ++generation_;
  }
  log(log_level::warning, name_ + ": " + f.message);
}

void pool::dial_worked() {
  std::lock_guard lock(mutex_);
  backoff_ = std::chrono::milliseconds{0};
}

std::unique_ptr<connection> pool::dial(const std::string& suffix) {
  check_backoff();
  auto c = std::make_unique<connection>(opts_, name_, app_name_ + suffix);
  try {
    c->connect();
  } catch (const pg_failure& f) {
    dial_failed(f);
    throw;
  }
  dial_worked();
  return c;
}

std::unique_ptr<connection> pool::take() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !idle_.empty() || out_ < opts_.pool; });
  ++out_;
  while (!idle_.empty()) {
    auto c = std::move(idle_.back().first);
    idle_.pop_back();
    // One the server closed while it sat here (a restart, an idle timeout,
    // pg_terminate_backend) is dropped before anything is sent on it.
    if (c->alive()) return c;
  }
  lock.unlock();
  return std::make_unique<connection>(opts_, name_, app_name_);
}

void pool::give_back(std::unique_ptr<connection> c, bool broken, std::uint64_t generation) {
  {
    std::lock_guard lock(mutex_);
    --out_;
    if (broken) {
      // Its idle siblings were probably broken by the same event (a server
      // restart): drop them too, so the next calls dial afresh.
      ++generation_;
      idle_.clear();
    } else if (c && c->connected() && generation == generation_) {
      idle_.emplace_back(std::move(c), generation_);
    }
  }
  cv_.notify_one();
}

void pool::run(const char* what, bool write, boost::system::error_code& ec,
               const std::function<void(connection&)>& body) {
  ec = {};
  // The first attempt's failure, when the connection broke under it: a write
  // sent whole may have committed, whatever the second attempt finds.
  std::optional<errc> first;
  const auto finish = [&](errc code) {
    ec = make_error_code(first == errc::outcome_unknown && code == errc::store_unavailable
                             ? errc::outcome_unknown
                             : code);
  };
  for (int attempt = 0;; ++attempt) {
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(mutex_);
      generation = generation_;
    }
    std::unique_ptr<connection> c = take();
    if (!c->connected()) {
      // A fresh dial; within the backoff none at all.
      try {
        check_backoff();
      } catch (const pg_failure& f) {
        give_back(nullptr, false, generation);
        finish(f.code);
        return;
      }
      try {
        c->connect();
      } catch (const pg_failure& f) {
        give_back(nullptr, false, generation);
        dial_failed(f);
        finish(f.code);
        return;
      }
      dial_worked();
    }
    try {
      body(*c);
      give_back(std::move(c), false, generation);
      return;
    } catch (const pg_failure& f) {
      const bool broken = f.lost || !c->connected();
      give_back(broken ? nullptr : std::move(c), broken, generation);
      // The connection broke (the server restarted, or closed an idle
      // connection): once more, on a fresh one. Safe for a write too: every
      // write of the store is idempotent (pg_batch.hpp), and one that was
      // not sent whole never ran (the server commits at the pipeline's Sync).
      // A timeout is not tried again: it would double the wait.
      if (f.retryable && attempt == 0) {
        first = f.code;
        log(log_level::warning, f.message + " (" + what + "; trying once more)");
        continue;
      }
      finish(f.code);
      log(f.lost ? log_level::warning : log_level::error,
          std::string(f.message) + " (" + what + (write ? ", a write)" : ")"));
      return;
    } catch (...) {
      give_back(nullptr, true, generation);
      throw;
    }
  }
}

}  // namespace delayq::detail::pg
