// Time zones for recurring schedules: the date library's transitions, then
// the TZif footer's POSIX rule (zone.hpp says why).
#include "detail/schedules/zone.hpp"

#include "detail/schedules/cron_expr.hpp"

#include <date/tz.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "delayq/log.hpp"

namespace delayq::detail::schedules {
namespace {

bool is_leap(std::int64_t y) noexcept { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

unsigned days_in_month(std::int64_t y, unsigned m) noexcept {
  static constexpr std::array<unsigned, 12> d{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : d[m - 1];
}

// The civil year of a day count since the epoch.
std::int64_t year_of_days(std::int64_t z) noexcept {
  std::int64_t y = 0;
  unsigned m = 0, d = 0;
  civil_from_days(z, y, m, d);
  return y;
}

// A small reader of the POSIX TZ grammar.
struct tz_reader {
  std::string_view s;
  std::size_t i = 0;
  bool done() const { return i >= s.size(); }
  char peek() const { return done() ? '\0' : s[i]; }

  bool name() {
    if (peek() == '<') {  // <+1030>, <-02>: a quoted name
      const std::size_t close = s.find('>', i);
      if (close == std::string_view::npos || close - i < 4) return false;
      i = close + 1;
      return true;
    }
    const std::size_t start = i;
    while (!done() && ((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z'))) ++i;
    return i - start >= 3;
  }
  bool number(int& v, int most) {
    const std::size_t start = i;
    v = 0;
    while (!done() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + (s[i] - '0');
      if (v > most) return false;
      ++i;
    }
    return i > start;
  }
  // [+-]hh[:mm[:ss]] in seconds; `hours` is the largest hour allowed.
  bool hms(std::int32_t& out, int hours) {
    int sign = 1;
    if (peek() == '+' || peek() == '-') sign = s[i++] == '-' ? -1 : 1;
    int h = 0, m = 0, sec = 0;
    if (!number(h, hours)) return false;
    if (peek() == ':') {
      ++i;
      if (!number(m, 59)) return false;
      if (peek() == ':') {
        ++i;
        if (!number(sec, 59)) return false;
      }
    }
    out = sign * (h * 3600 + m * 60 + sec);
    return true;
  }
};

}  // namespace

std::optional<posix_rule> posix_rule::parse(std::string_view text) {
  tz_reader r{text};
  posix_rule p;
  std::int32_t off = 0;
  // POSIX offsets are UTC minus local ("CET-1" is an hour east of UTC).
  if (!r.name() || !r.hms(off, 24)) return std::nullopt;
  p.std_offset_ = -off;
  if (r.done()) return p;
  if (!r.name()) return std::nullopt;
  p.has_dst_ = true;
  p.dst_offset_ = p.std_offset_ + 3600;
  if (r.peek() != ',') {
    if (!r.hms(off, 24)) return std::nullopt;
    p.dst_offset_ = -off;
  }
  // A footer always states its rules; POSIX's implementation-defined
  // default is not guessed at.
  auto date = [&](date_rule& d) {
    if (r.peek() != ',') return false;
    ++r.i;
    if (r.peek() == 'M') {
      ++r.i;
      d.k = date_rule::kind::month_week_day;
      if (!r.number(d.month, 12) || d.month < 1 || r.peek() != '.') return false;
      ++r.i;
      if (!r.number(d.week, 5) || d.week < 1 || r.peek() != '.') return false;
      ++r.i;
      if (!r.number(d.weekday, 6)) return false;
    } else if (r.peek() == 'J') {
      ++r.i;
      d.k = date_rule::kind::julian_1;
      if (!r.number(d.day, 365) || d.day < 1) return false;
    } else {
      d.k = date_rule::kind::julian_0;
      if (!r.number(d.day, 365)) return false;
    }
    if (r.peek() == '/') {
      ++r.i;
      return r.hms(d.time, 167);
    }
    return true;
  };
  if (!date(p.start_) || !date(p.end_) || !r.done()) return std::nullopt;
  return p;
}

std::int64_t posix_rule::transition(int y, const date_rule& r, std::int32_t offset_before) {
  std::int64_t day = 0;
  switch (r.k) {
    case date_rule::kind::month_week_day: {
      const std::int64_t first = days_from_civil(y, static_cast<unsigned>(r.month), 1);
      const int wd_first = static_cast<int>(((first % 7) + 11) % 7);  // 1970-01-01 was a Thursday
      int d = 1 + (r.weekday - wd_first + 7) % 7 + (r.week - 1) * 7;
      const int last = static_cast<int>(days_in_month(y, static_cast<unsigned>(r.month)));
      while (d > last) d -= 7;
      day = first + d - 1;
      break;
    }
    case date_rule::kind::julian_1:
      day = days_from_civil(y, 1, 1) + r.day - 1 + (is_leap(y) && r.day >= 60 ? 1 : 0);
      break;
    case date_rule::kind::julian_0: day = days_from_civil(y, 1, 1) + r.day; break;
  }
  return day * day_s + r.time - offset_before;
}

zone_span posix_rule::at(std::int64_t t) const {
  constexpr std::int64_t lo = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  if (!has_dst_) return {lo, hi, std_offset_};
  // The transitions of the years around t, in order; a tie (DST all year:
  // it ends as it starts again) leaves the later rule's offset.
  struct event {
    std::int64_t at;
    std::int32_t offset;
  };
  std::vector<event> ev;
  const std::int64_t y = year_of_days(floor_div(t, day_s));
  for (std::int64_t k = y - 1; k <= y + 1; ++k) {
    ev.push_back({transition(static_cast<int>(k), start_, std_offset_), dst_offset_});
    ev.push_back({transition(static_cast<int>(k), end_, dst_offset_), std_offset_});
  }
  std::stable_sort(ev.begin(), ev.end(),
                   [](const event& a, const event& b) { return a.at < b.at; });
  // Merge runs of one offset; keep the last event of a tie.
  std::vector<event> spans;
  for (const event& e : ev) {
    if (!spans.empty() && spans.back().at == e.at) spans.pop_back();
    if (spans.empty() || spans.back().offset != e.offset) spans.push_back(e);
  }
  std::size_t k = 0;
  while (k + 1 < spans.size() && spans[k + 1].at <= t) ++k;
  if (spans.empty() || spans[0].at > t) {
    // Before the first event of year y - 1: cannot happen for t in year y,
    // but stay defined.
    return {lo, spans.empty() ? hi : spans[0].at,
            spans.empty() ? std_offset_ : spans.back().offset};
  }
  return {spans[k].at, k + 1 < spans.size() ? spans[k + 1].at : hi, spans[k].offset};
}

struct zone_cache {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<zone>, std::less<>> zones;

  static zone_cache& get() {
    static zone_cache c;
    return c;
  }

  static std::string tz_dir() {
    const char* d = std::getenv("TZDIR");
    return d && *d ? std::string(d) : std::string("/usr/share/zoneinfo");
  }

  // The POSIX rule in the footer of the zone's TZif file, if any.
  static std::optional<posix_rule> footer(const std::string& name) {
    std::ifstream f(tz_dir() + "/" + name, std::ios::binary);
    if (!f) return std::nullopt;
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    const std::streamoff take = std::min<std::streamoff>(size, 512);
    f.seekg(size - take);
    std::string tail(static_cast<std::size_t>(take), '\0');
    if (!f.read(tail.data(), take)) return std::nullopt;
    if (tail.size() < 2 || tail.back() != '\n') return std::nullopt;
    const std::size_t open = tail.rfind('\n', tail.size() - 2);
    if (open == std::string::npos) return std::nullopt;
    return posix_rule::parse(std::string_view(tail).substr(open + 1, tail.size() - open - 2));
  }

  std::unique_ptr<zone> load(std::string_view name) {
    if (name.empty() || name.starts_with("right/") || name == "localtime" || name == "posixrules")
      return nullptr;
    auto z = std::unique_ptr<zone>(new zone);
    z->name_ = std::string(name);
    try {
      z->tz_ = date::locate_zone(z->name_);
      // The last transition the file lists: the footer's rule holds after it.
      const auto last =
          z->tz_->get_info(date::sys_seconds{std::chrono::seconds{std::int64_t{1} << 40}});
      z->tail_begin_ = last.begin.time_since_epoch().count();
    } catch (const std::exception&) {
      return nullptr;
    }
    z->tail_ = footer(z->name_);
    if (!z->tail_)
      log(log_level::warning, "delayq: time zone " + z->name_ +
                                  ": no rule for the years after its last listed transition; "
                                  "its last offset is kept");
    return z;
  }
};

const zone* zone::utc() {
  static const zone u = [] {
    zone z;
    z.name_ = "UTC";
    return z;
  }();
  return &u;
}

const zone* zone::find(std::string_view name) {
  if (name == "UTC") return utc();
  zone_cache& c = zone_cache::get();
  std::lock_guard lock(c.mutex);
  if (auto it = c.zones.find(name); it != c.zones.end()) return it->second.get();
  auto z = c.load(name);
  if (!z) return nullptr;
  const zone* p = z.get();
  c.zones.emplace(std::string(name), std::move(z));
  return p;
}

zone_span zone::at(std::int64_t t) const {
  constexpr std::int64_t lo = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  if (!tz_) return {lo, hi, 0};
  if (t >= tail_begin_ && tail_) {
    zone_span s = tail_->at(t);
    s.begin = std::max(s.begin, tail_begin_);
    return s;
  }
  const auto info = tz_->get_info(date::sys_seconds{std::chrono::seconds{t}});
  zone_span s;
  s.begin = info.begin.time_since_epoch().count();
  s.end = info.end.time_since_epoch().count();
  s.offset = static_cast<std::int32_t>(info.offset.count());
  if (s.end > tail_begin_ && !tail_) s.end = hi;
  if (s.begin < -(std::int64_t{1} << 50)) s.begin = lo;
  if (s.end > (std::int64_t{1} << 50)) s.end = hi;
  return s;
}

std::string tzdata_version() {
  std::ifstream f(zone_cache::tz_dir() + "/tzdata.zi");
  std::string line;
  if (!f || !std::getline(f, line)) return {};
  constexpr std::string_view tag = "# version ";
  return line.starts_with(tag) ? line.substr(tag.size()) : std::string{};
}

}  // namespace delayq::detail::schedules
