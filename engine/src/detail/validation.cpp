#include "detail/validation.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace delayq::detail {

bool valid_type(std::string_view type) noexcept {
  if (type.empty() || type.size() > max_type_length) return false;
  return std::all_of(type.begin(), type.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

namespace {

// Which bytes an id may hold: every one but spaces, control characters and
// DEL. has_bad_byte() tells whether any byte of `w` is one of those: eight
// bytes at a time (every schedule call checks its id; a byte at a time was
// a twentieth of the call). A byte below 0x21 borrows in w - 0x21..21
// where its own top bit was clear; bytes of 0x80 and up (UTF-8) are masked
// out by ~w; DEL is the zero byte of w ^ 0x7f..7f.
bool has_bad_byte(std::uint64_t w) noexcept {
  constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  const std::uint64_t below = (w - ones * 0x21) & ~w & highs;
  const std::uint64_t del = w ^ (ones * 0x7f);
  return (below | ((del - ones) & ~del & highs)) != 0;
}

}  // namespace

bool valid_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > max_id_length) return false;
  const std::size_t n = id.size();
  std::uint64_t w = 0x6161616161616161ull;  // "aaaaaaaa": a short id, padded
  if (n < 8) {
    std::memcpy(&w, id.data(), n);
    return !has_bad_byte(w);
  }
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    std::memcpy(&w, id.data() + i, 8);
    if (has_bad_byte(w)) return false;
  }
  std::memcpy(&w, id.data() + n - 8, 8);  // the tail, overlapping the last word
  return !has_bad_byte(w);
}

namespace {

bool valid_policy(const retry_policy& p) {
  return p.max_attempts >= 1 && p.base >= std::chrono::milliseconds{0} && p.cap >= p.base;
}

}  // namespace

boost::system::error_code check_options(const engine_options& o) {
  if (o.tick < std::chrono::milliseconds{1} || o.slots == 0 || o.workers == 0 || o.tables == 0 ||
      o.tables > 64 || o.max_pending == 0 || o.max_delay <= std::chrono::milliseconds{0} ||
      o.max_queued_writes == 0 || !(o.catch_up_rate >= 0) || !valid_policy(o.retry) ||
      !(o.alerts.failure_rate_threshold > 0 && o.alerts.failure_rate_threshold <= 1) ||
      o.alerts.window <= std::chrono::seconds{0} ||
      o.schedule_lookahead < std::chrono::seconds{1} ||
      o.schedule_lookahead > std::chrono::hours{24})
    return errc::invalid_options;
  for (const auto& [type, policy] : o.retry_per_type)
    if (!valid_policy(policy)) return errc::invalid_options;
  for (const auto& [type, timeout] : o.timeout_per_type)
    if (timeout <= std::chrono::milliseconds{0}) return errc::invalid_options;
  for (const auto& [type, limit] : o.type_concurrency)
    if (limit == 0) return errc::invalid_options;
  for (const auto& [type, limit] : o.type_capacity)
    if (limit == 0) return errc::invalid_options;
  return {};
}

std::int64_t now_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t latest_due_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::time_point::max().time_since_epoch())
      .count();
}

std::int64_t due_after(std::chrono::milliseconds delay, std::int64_t now,
                       std::chrono::milliseconds max_delay,
                       boost::system::error_code& ec) noexcept {
  ec = {};
  const std::int64_t d = delay.count();
  if (d < 0) {
    ec = errc::invalid_delay;
    return 0;
  }
  // Both bounds are checked by subtraction, never by adding to `now`: a
  // delay of 300 years (or of hours::max()) must not wrap around into the
  // past and run at once.
  if (d > max_delay.count() || d >= latest_due_ms() - now) {
    ec = errc::due_too_far;
    return 0;
  }
  return now + d;
}

std::int64_t due_at(std::chrono::system_clock::time_point due, std::int64_t now,
                    std::chrono::milliseconds max_delay, boost::system::error_code& ec) noexcept {
  ec = {};
  const std::int64_t ms =
      std::chrono::floor<std::chrono::milliseconds>(due.time_since_epoch()).count();
  if (ms < 0) {
    ec = errc::invalid_delay;
    return 0;
  }
  // The clock's last instant stands for "too far to represent" (async
  // schedule maps an overflowing delay to it), whatever max_delay allows.
  if (ms >= latest_due_ms() || (ms > now && ms - now > max_delay.count())) {
    ec = errc::due_too_far;
    return 0;
  }
  return ms;
}

std::uint32_t ttr_ms_of(std::chrono::milliseconds ttr, boost::system::error_code& ec) noexcept {
  if (ttr.count() < 0 || ttr.count() > std::numeric_limits<std::uint32_t>::max()) {
    ec = errc::invalid_ttr;
    return 0;
  }
  return static_cast<std::uint32_t>(ttr.count());
}

std::uint32_t clamped_ttr_ms(std::chrono::milliseconds ttr) noexcept {
  if (ttr.count() <= 0) return 0;
  return static_cast<std::uint32_t>(
      std::min<std::int64_t>(ttr.count(), std::numeric_limits<std::uint32_t>::max()));
}

namespace {

constexpr char base62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr std::uint64_t counter_span = 62ull * 62 * 62 * 62 * 62 * 62;  // 6 digits

}  // namespace

id_generator::id_generator() : nonce_(draw()) {}

std::uint64_t id_generator::draw() noexcept {
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

std::string id_generator::next() {
  // One atomic add: threads scheduling at once never wait for each other
  // here. Each span of 62^6 counter values has a nonce of its own: the
  // drawn one for the first (all but the busiest engines' only one), a
  // mix of it with the span's number after.
  const std::uint64_t c = counter_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t span = c / counter_span;
  std::uint64_t n = c % counter_span;
  std::uint64_t nonce = nonce_;
  if (span != 0) {
    std::uint64_t z = nonce + span * 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    nonce = z ^ (z >> 31);
  }
  std::string id(15, '0');
  // 9 digits hold 62^9 = 1.35e16 values, 53.6 bits of the nonce.
  for (int i = 8; i >= 0; --i) {
    id[static_cast<std::size_t>(i)] = base62[nonce % 62];
    nonce /= 62;
  }
  for (int i = 14; i >= 9; --i) {
    id[static_cast<std::size_t>(i)] = base62[n % 62];
    n /= 62;
  }
  return id;
}

}  // namespace delayq::detail

namespace delayq {

bool is_valid_type(std::string_view type) noexcept { return detail::valid_type(type); }

}  // namespace delayq
