#include "detail/failure_policy.hpp"

#include <algorithm>
#include <exception>

#include "delayq/log.hpp"

namespace delayq::detail {

failure_policy::failure_policy(const alert_options& alerts, std::uint64_t seed)
    : alerts_(alerts), random_(seed) {}

std::chrono::milliseconds failure_policy::ceiling(const retry_policy& p,
                                                  std::uint32_t attempt) noexcept {
  const unsigned shift = std::min<std::uint32_t>(attempt > 0 ? attempt - 1 : 0, 62);
  const auto base = static_cast<std::uint64_t>(p.base.count());
  const auto cap = static_cast<std::uint64_t>(p.cap.count());
  // base << shift overflows exactly when base > cap >> shift; the cap wins then.
  const std::uint64_t c = base > (cap >> shift) ? cap : std::min(cap, base << shift);
  return std::chrono::milliseconds{static_cast<std::int64_t>(c)};
}

std::chrono::milliseconds failure_policy::backoff(const retry_policy& p, std::uint32_t attempt) {
  std::uniform_int_distribution<std::int64_t> pick(0, ceiling(p, attempt).count());
  return std::chrono::milliseconds{pick(random_)};
}

void failure_policy::note_outcome(const std::string& type, bool ok, std::vector<alert>& out) {
  if (!alerts_.on_alert) return;
  type_health& h = health_[type];
  const auto bucket_len = std::max<std::chrono::steady_clock::duration>(
      alerts_.window / buckets, std::chrono::milliseconds{1});
  const auto index =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch() / bucket_len);
  auto& b = h.b[index % buckets];
  if (b.index != index) b = {index, 0, 0};
  ++b.attempts;
  if (!ok) ++b.failures;
  std::uint64_t attempts = 0, failures = 0;
  for (const auto& x : h.b)
    if (x.index + buckets > index) {
      attempts += x.attempts;
      failures += x.failures;
    }
  const double rate = attempts ? static_cast<double>(failures) / static_cast<double>(attempts) : 0;
  const bool over = attempts >= alerts_.min_attempts && rate >= alerts_.failure_rate_threshold;
  if (over && !h.alerting) {
    alert al;
    al.what = alert::kind::failure_rate;
    al.type = type;
    al.failure_rate = rate;
    al.attempts = attempts;
    al.failures = failures;
    out.push_back(std::move(al));
  }
  h.alerting = over;
}

void failure_policy::note_death(const task& t, const std::string& error,
                                std::vector<alert>& out) const {
  if (!alerts_.on_alert) return;
  alert al;
  al.what = alert::kind::task_died;
  al.type = t.type;
  al.task_id = t.id;
  al.error = error;
  out.push_back(std::move(al));
}

void failure_policy::raise(const std::vector<alert>& alerts) const {
  for (const alert& al : alerts) {
    try {
      alerts_.on_alert(al);
    } catch (const std::exception& e) {
      log(log_level::error, std::string("alert callback threw: ") + e.what());
    } catch (...) {
      log(log_level::error, "alert callback threw an exception of unknown type");
    }
  }
}

}  // namespace delayq::detail
