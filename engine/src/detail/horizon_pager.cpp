// horizon_pager: the horizon's bookkeeping and the pager's thread
// (horizon_pager.hpp explains the watermark's three steps).
#include "detail/horizon_pager.hpp"

#include <algorithm>

#include "delayq/log.hpp"
#include "detail/validation.hpp"

namespace delayq::detail {

std::uint64_t horizon_pager::begin_read() {
  std::lock_guard lock(state_);
  reads_.insert(erase_seq_);
  reading_.store(true, std::memory_order_release);
  return erase_seq_;
}

void horizon_pager::end_read(std::uint64_t seq) {
  std::lock_guard lock(state_);
  reads_.erase(reads_.find(seq));
  if (reads_.empty()) {
    erased_.clear();
    reading_.store(false, std::memory_order_release);
  } else if (erased_.size() > 4096) {
    // Reads that overlap for long (a pager retrying through an outage, a
    // stream of lookups) must not grow the log without end: what no read in
    // progress began before is of no use.
    const std::uint64_t oldest = *reads_.begin();
    std::erase_if(erased_, [&](const auto& e) { return e.second <= oldest; });
  }
}

void horizon_pager::note_gone(std::string_view id) {
  // A read begins under the lock of the table this record is in, which
  // the caller holds: a read that began before is seen here.
  if (!reading_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(state_);
  if (!reads_.empty()) erased_[std::string(id)] = ++erase_seq_;
}

bool horizon_pager::erased_since(const std::string& id, std::uint64_t seq) const {
  std::lock_guard lock(state_);
  const auto it = erased_.find(id);
  return it != erased_.end() && it->second > seq;
}

void horizon_pager::pin(const std::string& id) {
  std::lock_guard lock(state_);
  ++pinned_[id];
}

bool horizon_pager::unpin(const std::string& id) {
  std::lock_guard lock(state_);
  auto it = pinned_.find(id);
  if (it == pinned_.end() || --it->second > 0) return false;
  pinned_.erase(it);
  return true;
}

bool horizon_pager::pinned(std::string_view id) const {
  std::lock_guard lock(state_);
  return !pinned_.empty() && pinned_.count(std::string(id)) != 0;
}

void horizon_pager::run(host& h) {
  if (!thread_.joinable()) thread_ = std::thread([this, &h] { loop(h); });
}

void horizon_pager::loop(host& h) {
  // Pages a step ahead: a task is read in at least horizon - step before due.
  // Pages go by the clock, whatever lookups come in between.
  const auto step = std::chrono::milliseconds{std::max<std::int64_t>(horizon_ms() / 4, 10)};
  auto next_page = std::chrono::steady_clock::now();
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait_until(lock, next_page, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      if (!jobs_.empty() && std::chrono::steady_clock::now() < next_page) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
    }
    if (job) {
      try {
        job();
      } catch (const std::exception& e) {
        log(log_level::error, std::string("horizon: a lookup failed: ") + e.what());
      }
      continue;
    }
    next_page = std::chrono::steady_clock::now() + step;
    std::int64_t from = 0, until = 0;
    std::uint64_t seq = 0;
    {
      std::lock_guard lock(h.mutex());
      if (!h.running()) continue;
      until = now_ms() + horizon_ms();
      from = watermark();
      if (until <= from) continue;
      watermark_.store(until, std::memory_order_release);
      seq = begin_read();
    }
    h.flush_writes();
    bool done = false;
    try {
      done = h.page_in(from, until, seq);
    } catch (const std::exception& e) {
      // Out of memory, say: the range must still be read. Move the watermark
      // back so the next step reads it again.
      log(log_level::error, std::string("horizon: reading due tasks failed: ") + e.what());
      std::lock_guard lock(h.mutex());
      watermark_.store(std::min(watermark(), from), std::memory_order_release);
      done = true;
    }
    std::lock_guard lock(h.mutex());
    end_read(seq);
    if (!done) return;
  }
}

void horizon_pager::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

bool horizon_pager::wait_to_retry() {
  std::unique_lock lock(mutex_);
  return !cv_.wait_for(lock, std::chrono::milliseconds{200}, [&] { return stop_; });
}

void horizon_pager::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Lookups still queued: run them now, so every async call is answered
  // (the engine is stopping: they fail with not_running).
  std::deque<std::function<void()>> jobs;
  {
    std::lock_guard lock(mutex_);
    jobs.swap(jobs_);
  }
  for (auto& job : jobs) job();
}

}  // namespace delayq::detail
