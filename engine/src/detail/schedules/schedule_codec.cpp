// The bytes of a stored schedule (schedule_codec.hpp has the layout).
#include "detail/schedules/schedule_codec.hpp"

#include <cstring>

#include "delayq/task.hpp"

namespace delayq::detail::schedules {
namespace {

constexpr std::uint8_t definition_version = 1;
constexpr std::uint8_t state_version = 1;

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_i64(std::string& out, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Reads what the put_* wrote; every read checks the bytes left.
struct reader {
  std::string_view in;
  bool ok = true;
  bool take(std::size_t n, const char*& p) {
    if (!ok || in.size() < n) return ok = false;
    p = in.data();
    in.remove_prefix(n);
    return true;
  }
  std::uint8_t u8() {
    const char* p = nullptr;
    return take(1, p) ? static_cast<std::uint8_t>(*p) : 0;
  }
  std::uint32_t u32() {
    const char* p = nullptr;
    if (!take(4, p)) return 0;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
    return v;
  }
  std::int64_t i64() {
    const char* p = nullptr;
    if (!take(8, p)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
    return static_cast<std::int64_t>(v);
  }
  std::string str() {
    const std::uint32_t n = u32();
    const char* p = nullptr;
    return take(n, p) ? std::string(p, n) : std::string{};
  }
};

}  // namespace

std::string encode_definition(const schedule& s) {
  std::string out;
  out.reserve(64 + s.type.size() + s.payload.size() + s.cron.size() + s.timezone.size());
  put_u8(out, definition_version);
  put_str(out, s.type);
  put_str(out, s.payload);
  put_str(out, s.cron);
  put_str(out, s.timezone);
  put_i64(out, s.every.count());
  put_u8(out, s.start ? 1 : 0);
  put_i64(out, s.start ? to_epoch_ms(*s.start) : 0);
  put_u8(out, s.end ? 1 : 0);
  put_i64(out, s.end ? to_epoch_ms(*s.end) : 0);
  put_u8(out, static_cast<std::uint8_t>(s.missed));
  put_u32(out, s.priority);
  put_u32(out, static_cast<std::uint32_t>(s.ttr.count()));
  put_u8(out, static_cast<std::uint8_t>(s.conflict));
  return out;
}

std::optional<schedule> decode_definition(std::string_view id, std::string_view bytes) {
  reader r{bytes};
  if (r.u8() != definition_version) return std::nullopt;
  schedule s;
  s.id = std::string(id);
  s.type = r.str();
  s.payload = r.str();
  s.cron = r.str();
  s.timezone = r.str();
  s.every = std::chrono::milliseconds{r.i64()};
  const bool has_start = r.u8() != 0;
  const std::int64_t start = r.i64();
  const bool has_end = r.u8() != 0;
  const std::int64_t end = r.i64();
  if (has_start) s.start = from_epoch_ms(start);
  if (has_end) s.end = from_epoch_ms(end);
  const std::uint8_t missed = r.u8();
  s.priority = r.u32();
  s.ttr = std::chrono::milliseconds{r.u32()};
  const std::uint8_t conflict = r.u8();
  if (!r.ok || !r.in.empty() || missed > 2 || conflict > 2) return std::nullopt;
  s.missed = static_cast<missed_runs>(missed);
  s.conflict = static_cast<on_conflict>(conflict);
  return s;
}

std::string encode_state(const schedule_state& st) {
  std::string out;
  out.reserve(33);
  put_u8(out, state_version);
  put_i64(out, st.cursor_ms);
  put_i64(out, st.doubt_ms);
  put_i64(out, st.updated_ms);
  put_i64(out, static_cast<std::int64_t>(st.claimant));
  return out;
}

std::optional<schedule_state> decode_state(std::string_view bytes) {
  reader r{bytes};
  if (r.u8() != state_version) return std::nullopt;
  schedule_state st;
  st.cursor_ms = r.i64();
  st.doubt_ms = r.i64();
  st.updated_ms = r.i64();
  st.claimant = static_cast<std::uint64_t>(r.i64());
  if (!r.ok || !r.in.empty()) return std::nullopt;
  return st;
}

}  // namespace delayq::detail::schedules
