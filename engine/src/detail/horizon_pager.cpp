// horizon_pager: the horizon's bookkeeping and the pager's thread
// (horizon_pager.hpp explains the watermark's three steps).
#include "detail/horizon_pager.hpp"

#include <algorithm>

#include "delayq/log.hpp"
#include "detail/validation.hpp"

namespace delayq::detail {

std::uint64_t horizon_pager::begin_read_locked() {
  reads_.insert(erase_seq_);
  return erase_seq_;
}

void horizon_pager::end_read_locked(std::uint64_t seq) {
  reads_.erase(reads_.find(seq));
  if (reads_.empty()) {
    erased_.clear();
  } else if (erased_.size() > 4096) {
    // Reads that overlap for long (a pager retrying through an outage, a
    // stream of lookups) must not grow the log without end: what no read in
    // progress began before is of no use.
    const std::uint64_t oldest = *reads_.begin();
    std::erase_if(erased_, [&](const auto& e) { return e.second <= oldest; });
  }
}

void horizon_pager::note_gone_slow(std::string_view id) { erased_[std::string(id)] = ++erase_seq_; }

bool horizon_pager::erased_since_locked(const std::string& id, std::uint64_t seq) const {
  const auto it = erased_.find(id);
  return it != erased_.end() && it->second > seq;
}

bool horizon_pager::unpin_locked(const std::string& id) {
  auto it = pinned_.find(id);
  if (it == pinned_.end() || --it->second > 0) return false;
  pinned_.erase(it);
  return true;
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
      if (until <= watermark_) continue;
      from = watermark_;
      watermark_ = until;
      seq = begin_read_locked();
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
      watermark_ = std::min(watermark_, from);
      done = true;
    }
    std::lock_guard lock(h.mutex());
    end_read_locked(seq);
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
