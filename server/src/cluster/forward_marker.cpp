#include "cluster/forward_marker.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/system/system_error.hpp>
#include <charconv>
#include <optional>
#include <stdexcept>

#include "delayq/log.hpp"
#include "security/hmac_sha256.hpp"
#include "security/secure_random.hpp"

namespace delayq::server {
namespace {

namespace beast = boost::beast;

beast::string_view marker_header_name() {
  return {forward_marker::header.data(), forward_marker::header.size()};
}

// The text under the MAC (forward_marker.hpp). A version line first, so a
// later format cannot be mistaken for this one; the body enters as its
// hash, so the text stays small whatever the body.
std::string marker_mac_input(std::string_view instance, std::string_view unix_ms,
                             std::string_view method, std::string_view target,
                             std::string_view body) {
  std::string text = "delayq-forward-v1\n";
  text.append(instance).append("\n");
  text.append(unix_ms).append("\n");
  text.append(method).append("\n");
  text.append(target).append("\n");
  text.append(to_hex(sha256::of(body)));
  return text;
}

std::int64_t marker_unix_ms(forward_marker::clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

const char* marker_verdict_name(forward_marker::verdict v) {
  switch (v) {
    case forward_marker::verdict::absent: return "absent";
    case forward_marker::verdict::valid: return "valid";
    case forward_marker::verdict::malformed: return "malformed";
    case forward_marker::verdict::bad_mac: return "its MAC does not verify";
    case forward_marker::verdict::out_of_window: return "its time is too far from this clock";
  }
  return "unknown";
}

std::optional<std::string> marker_stored_key(delayq::task_store& store,
                                             boost::system::error_code& ec) {
  auto* const stored = delayq::settings_of(store, ec);
  if (!stored) return std::nullopt;
  auto settings = stored->load_settings(ec);
  if (ec) return std::nullopt;
  for (auto& [key, value] : settings)
    if (key == forward_marker::setting_key && !value.empty()) return std::move(value);
  return std::nullopt;
}

}  // namespace

forward_marker::forward_marker(std::string key) { set_key(std::move(key)); }

void forward_marker::set_key(std::string key) {
  if (key.empty()) throw std::invalid_argument("forward_marker: the key is empty");
  auto k = std::make_shared<const std::string>(std::move(key));
  std::lock_guard lock(mutex_);
  key_ = std::move(k);
}

std::shared_ptr<const std::string> forward_marker::key() const {
  std::lock_guard lock(mutex_);
  return key_;
}

std::string forward_marker::make(std::string_view instance, std::string_view method,
                                 std::string_view target, std::string_view body,
                                 clock::time_point now) const {
  const std::string ms = std::to_string(marker_unix_ms(now));
  const auto mac = hmac_sha256(*key(), marker_mac_input(instance, ms, method, target, body));
  std::string value(instance);
  value.append(" ").append(ms).append(" ").append(to_hex(mac));
  return value;
}

forward_marker::verdict forward_marker::check(const http_request& req,
                                              clock::time_point now) const {
  const auto name = marker_header_name();
  const std::size_t count = req.count(name);
  if (count == 0) return verdict::absent;
  if (count > 1) return verdict::malformed;
  const auto raw = req.find(name)->value();
  const std::string_view value(raw.data(), raw.size());
  // INSTANCE UNIX_MS MAC: an instance name has no spaces (cluster_options).
  const std::size_t s1 = value.find(' ');
  if (s1 == std::string_view::npos || s1 == 0) return verdict::malformed;
  const std::size_t s2 = value.find(' ', s1 + 1);
  if (s2 == std::string_view::npos || value.find(' ', s2 + 1) != std::string_view::npos)
    return verdict::malformed;
  const std::string_view instance = value.substr(0, s1);
  const std::string_view ms_text = value.substr(s1 + 1, s2 - s1 - 1);
  const std::string_view mac = value.substr(s2 + 1);
  std::int64_t ms = 0;
  const auto [end, err] = std::from_chars(ms_text.data(), ms_text.data() + ms_text.size(), ms);
  if (ms_text.empty() || ms_text.size() > 18 || err != std::errc{} ||
      end != ms_text.data() + ms_text.size() || ms_text.front() == '-' || mac.size() != 64)
    return verdict::malformed;
  const std::string_view method(req.method_string().data(), req.method_string().size());
  const std::string_view target(req.target().data(), req.target().size());
  const auto expected =
      hmac_sha256(*key(), marker_mac_input(instance, ms_text, method, target, req.body()));
  if (!constant_time_equal(to_hex(expected), mac)) return verdict::bad_mac;
  // Checked after the MAC: only a member's marker is worth telling apart
  // by its time (a clock that drifted).
  const std::int64_t skew = marker_unix_ms(now) - ms;
  const std::int64_t limit = std::chrono::milliseconds(window).count();
  if (skew > limit || skew < -limit) return verdict::out_of_window;
  return verdict::valid;
}

bool forward_marker::is_forwarded(http_request& req) const {
  const verdict v = check(req, clock::now());
  if (v == verdict::valid) return true;
  if (v == verdict::absent) return false;
  rejected_.fetch_add(1, std::memory_order_relaxed);
  const auto raw = req.find(marker_header_name())->value();
  warn(v, std::string_view(raw.data(), raw.size()));
  req.erase(marker_header_name());
  return false;
}

void forward_marker::warn(verdict v, std::string_view value) const {
  // Once a minute at most: a client that sends markers in a loop must not
  // fill the log.
  const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = last_warning_ms_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < 60'000) return;
  if (!last_warning_ms_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  const std::string_view shown = value.substr(0, value.find(' ')).substr(0, 128);
  log(log_level::warning,
      "delayq-server: ignored a forwarding marker naming \"" + std::string(shown) + "\" (" +
          marker_verdict_name(v) +
          "): the call was taken as a client's. A client set it, or an instance runs with "
          "another --cluster-secret or --token, or a clock more than " +
          std::to_string(window.count()) + " s off (" + std::to_string(rejected()) +
          " ignored since the start, in /metrics as delayq_forward_marker_rejected_total)");
}

std::string forward_marker::load_or_create_key(delayq::task_store& store, std::string_view ours,
                                               boost::system::error_code& ec) {
  ec = {};
  if (auto stored = marker_stored_key(store, ec)) return std::move(*stored);
  if (ec) return {};
  const std::string mine = ours.empty() ? random_hex(32) : std::string(ours);
  if (auto* const settings = delayq::settings_of(store, ec))
    settings->save_setting(setting_key, mine, ec);
  if (ec) return {};
  // Another instance may have saved its own meanwhile: the store's is the
  // one every instance ends up with.
  auto stored = marker_stored_key(store, ec);
  if (ec) return {};
  return stored ? std::move(*stored) : mine;
}

std::string forward_marker::load_or_create_key(delayq::task_store& store, std::string_view ours) {
  boost::system::error_code ec;
  std::string key = load_or_create_key(store, ours, ec);
  if (ec) throw boost::system::system_error(ec, "reading the cluster's forwarding key");
  return key;
}

}  // namespace delayq::server
