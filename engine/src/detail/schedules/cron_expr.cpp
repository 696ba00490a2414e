// Cron expressions: the parser and the search for the next matching local
// time (cron_expr.hpp has the grammar and the semantics).
#include "detail/schedules/cron_expr.hpp"

#include <array>
#include <bit>
#include <cctype>
#include <limits>
#include <vector>

namespace delayq::detail::schedules {

std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) noexcept {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2);
}

namespace {

struct field_spec {
  const char* name;
  int lo, hi;
  const std::array<const char*, 12>* names;  // index 0 is value `names_base`
  int names_base;
};

constexpr std::array<const char*, 12> month_names{"jan", "feb", "mar", "apr", "may", "jun",
                                                  "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<const char*, 12> day_names{"sun", "mon",   "tue",   "wed",   "thu",   "fri",
                                                "sat", nullptr, nullptr, nullptr, nullptr, nullptr};

constexpr field_spec second_f{"second", 0, 59, nullptr, 0};
constexpr field_spec minute_f{"minute", 0, 59, nullptr, 0};
constexpr field_spec hour_f{"hour", 0, 23, nullptr, 0};
constexpr field_spec dom_f{"day-of-month", 1, 31, nullptr, 0};
constexpr field_spec month_f{"month", 1, 12, &month_names, 1};
// 7 is Sunday too; parse_field folds it onto 0.
constexpr field_spec dow_f{"day-of-week", 0, 7, &day_names, 0};

// One value: digits, or a name of the field. -1 when neither.
int value_of(std::string_view s, const field_spec& f) {
  if (s.empty()) return -1;
  if (std::isdigit(static_cast<unsigned char>(s[0]))) {
    int v = 0;
    for (char c : s) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
      v = v * 10 + (c - '0');
      if (v > 1000) return 1000;  // out of range either way
    }
    return v;
  }
  if (f.names == nullptr || s.size() != 3) return -1;
  for (std::size_t k = 0; k < f.names->size(); ++k) {
    const char* n = (*f.names)[k];
    if (n == nullptr) break;
    bool same = true;
    for (std::size_t i = 0; i < 3; ++i)
      if (std::tolower(static_cast<unsigned char>(s[i])) != n[i]) same = false;
    if (same) return static_cast<int>(k) + f.names_base;
  }
  return -1;
}

// Parses one field into `bits`; false with `why` set on an error.
bool parse_field(std::string_view text, const field_spec& f, std::uint64_t& bits,
                 std::string& why) {
  auto fail = [&](const std::string& what) {
    why = std::string(f.name) + " field '" + std::string(text) + "': " + what;
    return false;
  };
  bits = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) return fail("an empty list item");
    std::string_view base = item;
    int step = 1;
    bool stepped = false;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
      base = item.substr(0, slash);
      const std::string_view s = item.substr(slash + 1);
      bool digits = !s.empty();
      for (char c : s) digits = digits && std::isdigit(static_cast<unsigned char>(c));
      step = digits ? value_of(s, second_f) : -1;
      const int span = f.hi - f.lo + 1;
      if (step < 1 || step > span)
        return fail("the step '" + std::string(s) + "' must be a number from 1 to " +
                    std::to_string(span));
      stepped = true;
    }
    int lo = 0, hi = 0;
    if (base == "*") {
      lo = f.lo;
      hi = f.hi;  // 0-7 for the day of week: "*/7" is Sunday, as in croniter
    } else if (const std::size_t dash = base.find('-'); dash != std::string_view::npos) {
      const std::string_view a = base.substr(0, dash), b = base.substr(dash + 1);
      lo = value_of(a, f);
      hi = value_of(b, f);
      if (lo < 0 || hi < 0)
        return fail("'" + std::string(base) + "' is not a range of numbers" +
                    (f.names ? " or names" : ""));
      if (&f == &dow_f && hi == 0 && lo > 0) hi = 7;  // FRI-SUN
      if (lo < f.lo || lo > f.hi || hi < f.lo || hi > f.hi)
        return fail("'" + std::string(base) + "' is out of range " + std::to_string(f.lo) + "-" +
                    std::to_string(f.hi));
      if (lo > hi)
        return fail("the range '" + std::string(base) +
                    "' runs backwards (ranges that wrap around are not supported)");
    } else {
      lo = value_of(base, f);
      if (lo < 0) {
        if (base == "?" || base.find_first_of("LW#") != std::string_view::npos ||
            base.starts_with("H"))
          return fail("'" + std::string(base) + "' is not supported (no L, W, #, ? or H)");
        return fail("'" + std::string(base) + "' is not a number" + (f.names ? " or a name" : ""));
      }
      if (lo < f.lo || lo > f.hi)
        return fail(std::to_string(lo) + " is out of range " + std::to_string(f.lo) + "-" +
                    std::to_string(f.hi));
      // "N/S" is "N-max/S" (cron-parser, croniter): "5/2" in the day of
      // week is 5-7/2, Friday and Sunday.
      hi = stepped ? f.hi : lo;
    }
    for (int v = lo; v <= hi; v += step) bits |= std::uint64_t{1} << (&f == &dow_f ? v % 7 : v);
  }
  return true;
}

std::vector<std::string_view> split_fields(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<cron_expr> cron_expr::parse(std::string_view text, std::string& why) {
  if (text.size() > 1024) {
    why = "longer than 1024 characters";
    return std::nullopt;
  }
  for (char c : text)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
      why = "holds a control character";
      return std::nullopt;
    }
  std::string_view body = text;
  std::string expanded;
  {
    const auto f = split_fields(text);
    if (f.size() == 1 && f[0].starts_with("@")) {
      const std::string m = lower(f[0]);
      if (m == "@yearly" || m == "@annually")
        expanded = "0 0 1 1 *";
      else if (m == "@monthly")
        expanded = "0 0 1 * *";
      else if (m == "@weekly")
        expanded = "0 0 * * 0";
      else if (m == "@daily" || m == "@midnight")
        expanded = "0 0 * * *";
      else if (m == "@hourly")
        expanded = "0 * * * *";
      else {
        why = "unknown macro '" + std::string(f[0]) +
              "' (macros: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)";
        return std::nullopt;
      }
      body = expanded;
    }
  }
  const auto f = split_fields(body);
  if (f.size() != 5 && f.size() != 6) {
    why = "has " + std::to_string(f.size()) +
          " fields; a cron expression has 5 (minute hour day-of-month month day-of-week) or 6 "
          "(second first)";
    return std::nullopt;
  }
  const std::size_t o = f.size() - 5;  // index of the minute field
  cron_expr c;
  std::uint64_t b = 0;
  if (o == 1) {
    if (!parse_field(f[0], second_f, b, why)) return std::nullopt;
    c.seconds = b;
  }
  if (!parse_field(f[o], minute_f, b, why)) return std::nullopt;
  c.minutes = b;
  if (!parse_field(f[o + 1], hour_f, b, why)) return std::nullopt;
  c.hours = static_cast<std::uint32_t>(b);
  if (!parse_field(f[o + 2], dom_f, b, why)) return std::nullopt;
  c.days = static_cast<std::uint32_t>(b);
  if (!parse_field(f[o + 3], month_f, b, why)) return std::nullopt;
  c.months = static_cast<std::uint16_t>(b);
  if (!parse_field(f[o + 4], dow_f, b, why)) return std::nullopt;
  c.weekdays = static_cast<std::uint8_t>(b);
  c.hour_star = f[o + 1].starts_with("*");
  c.dom_star = f[o + 2].starts_with("*");
  c.dow_star = f[o + 4].starts_with("*");
  // When the day of month must match (it is not ORed with a restricted day
  // of week), some month of the set must have one of its days: "30 2" never
  // comes.
  if (c.dom_star || c.dow_star) {
    static constexpr std::array<unsigned, 13> longest{0,  31, 29, 31, 30, 31, 30,
                                                      31, 31, 30, 31, 30, 31};
    bool any = false;
    for (unsigned m = 1; m <= 12; ++m)
      if (c.months & (1u << m))
        for (unsigned d = 1; d <= longest[m]; ++d)
          if (c.days & (1u << d)) any = true;
    if (!any) {
      why = "never matches: no month of the month field has a day of the day-of-month field";
      return std::nullopt;
    }
  }
  return c;
}

bool cron_expr::day_matches(std::int64_t z) const noexcept {
  std::int64_t y = 0;
  unsigned m = 0, d = 0;
  civil_from_days(z, y, m, d);
  if (!(months & (1u << m))) return false;
  const bool dom = days & (1u << d);
  const auto wd = static_cast<unsigned>(((z % 7) + 11) % 7);  // 1970-01-01 was a Thursday (4)
  const bool dow = weekdays & (1u << wd);
  return dom_star || dow_star ? dom && dow : dom || dow;
}

namespace {

// The lowest set bit of `bits` at or above `from`, or -1.
int next_bit(std::uint64_t bits, int from) noexcept {
  if (from >= 64) return -1;
  const std::uint64_t rest = bits & (~std::uint64_t{0} << from);
  return rest ? std::countr_zero(rest) : -1;
}

}  // namespace

std::optional<std::int64_t> cron_expr::next_local(std::int64_t from,
                                                  std::int64_t limit) const noexcept {
  // 100 years of seconds: a valid expression matches within about 8 years
  // (a 29 February that is also a given weekday), so a search this long
  // only ends early for the schedule's own end.
  constexpr std::int64_t most = std::int64_t{100} * 366 * day_s;
  if (from > std::numeric_limits<std::int64_t>::max() - most) return std::nullopt;
  if (limit > from + most) limit = from + most;
  std::int64_t t = from;
  while (t < limit) {
    const std::int64_t day = floor_div(t, day_s);
    const std::int64_t sod = t - day * day_s;
    std::int64_t y = 0;
    unsigned m = 0, d = 0;
    civil_from_days(day, y, m, d);
    if (!(months & (1u << m))) {
      t = (m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1)) * day_s;
      continue;
    }
    if (!day_matches(day)) {
      t = (day + 1) * day_s;
      continue;
    }
    const int h = static_cast<int>(sod / 3600);
    const int nh = next_bit(hours, h);
    if (nh < 0) {
      t = (day + 1) * day_s;
      continue;
    }
    if (nh > h) {
      t = day * day_s + nh * 3600;
      continue;
    }
    const int mi = static_cast<int>(sod % 3600 / 60);
    const int nmi = next_bit(minutes, mi);
    if (nmi < 0) {
      t = day * day_s + (h + 1) * 3600;
      continue;
    }
    if (nmi > mi) {
      t = day * day_s + h * 3600 + nmi * 60;
      continue;
    }
    const int s = static_cast<int>(sod % 60);
    const int ns = next_bit(seconds, s);
    if (ns < 0) {
      t = day * day_s + h * 3600 + (mi + 1) * 60;
      continue;
    }
    const std::int64_t found = day * day_s + h * 3600 + mi * 60 + ns;
    return found < limit ? std::optional<std::int64_t>(found) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace delayq::detail::schedules
