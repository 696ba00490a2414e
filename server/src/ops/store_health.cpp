#include "ops/store_health.hpp"

namespace delayq::server {

store_health::store_health(probe_fn probe, options opts) : probe_(std::move(probe)), opts_(opts) {}

store_health::~store_health() { stop(); }

void store_health::start() {
  std::string why;
  const bool ok = probe_(why);
  record(ok, std::move(why));
  thread_ = std::thread([this] { loop(); });
}

void store_health::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

store_health::state store_health::now() const {
  std::lock_guard lock(mutex_);
  state s;
  s.ok = ok_;
  s.why = why_;
  if (checked_ == clock::time_point{}) return s;  // never probed: "not probed yet"
  s.age = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - checked_);
  if (s.ok && s.age > opts_.stale_after) {
    s.ok = false;
    s.why = "the store did not answer a probe for " + std::to_string(s.age.count()) + " ms";
  }
  return s;
}

void store_health::record(bool ok, std::string why) {
  std::lock_guard lock(mutex_);
  ok_ = ok;
  why_ = ok ? std::string{} : std::move(why);
  checked_ = clock::now();
}

void store_health::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, opts_.interval, [this] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    std::string why;
    const bool ok = probe_(why);
    record(ok, std::move(why));
    lock.lock();
  }
}

}  // namespace delayq::server
