// A strict parser of the Prometheus text exposition format 0.0.4, for tests
// that scrape delayq's metrics (the engine library's and delayq-server's
// /metrics). Every line must be a `# HELP`, a `# TYPE`, another comment, or a
// sample; anything else is an error. On top of the syntax it checks what a
// Prometheus server relies on: every sample's family has a TYPE, declared
// once and before its samples; a family's samples are contiguous; no series
// appears twice; counters are not negative; and each histogram series has
// cumulative, non-decreasing buckets with increasing `le` ending at "+Inf",
// whose count equals `_count`, and a `_sum`.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace delayq_test::prom {

struct sample {
  std::string name;
  std::map<std::string, std::string> labels;  // values unescaped
  double value = 0;
  int line = 0;
};

struct family {
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;  // unescaped
  bool has_help = false;
};

struct exposition {
  std::map<std::string, family> families;
  std::vector<sample> samples;
  std::vector<std::string> errors;

  /// The value of the series `name` with exactly `labels`, if present.
  std::optional<double> value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const {
    for (const sample& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    return std::nullopt;
  }
  /// The family a sample name belongs to ("x_bucket" of histogram x is x's).
  std::string family_of(const std::string& name) const {
    if (families.count(name)) return name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string_view s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        const std::string base = name.substr(0, name.size() - s.size());
        auto f = families.find(base);
        if (f != families.end() && (f->second.type == "histogram" || f->second.type == "summary"))
          return base;
      }
    }
    return name;
  }
};

namespace detail {

inline bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
inline bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }
inline bool label_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool label_char(char c) { return label_start(c) || (c >= '0' && c <= '9'); }

inline bool metric_name(std::string_view s) {
  if (s.empty() || !name_start(s[0])) return false;
  for (char c : s)
    if (!name_char(c)) return false;
  return true;
}

// A float as Go's ParseFloat reads it in the format (no hex, no underscores).
inline std::optional<double> parse_float(std::string_view v) {
  if (v == "+Inf" || v == "Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  std::size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
  if (i < v.size() && v[i] == '.') {
    ++i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    std::size_t exp = 0;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++exp;
    if (exp == 0) return std::nullopt;
  }
  if (i != v.size()) return std::nullopt;
  try {
    return std::stod(std::string(v));
  } catch (...) {
    return std::nullopt;  // out of range
  }
}

inline bool integer(std::string_view v) {
  std::size_t i = v.starts_with('-') ? 1 : 0;
  if (i == v.size()) return false;
  for (; i < v.size(); ++i)
    if (v[i] < '0' || v[i] > '9') return false;
  return true;
}

// `{a="x",b="y"}` from position i (at '{'); fills labels, moves i past '}'.
inline bool parse_labels(std::string_view line, std::size_t& i,
                         std::map<std::string, std::string>& labels, std::string& why) {
  ++i;  // '{'
  for (;;) {
    if (i < line.size() && line[i] == '}') {
      ++i;
      return true;
    }
    if (i >= line.size() || !label_start(line[i])) return why = "bad label name", false;
    const std::size_t start = i;
    while (i < line.size() && label_char(line[i])) ++i;
    std::string name(line.substr(start, i - start));
    if (name.starts_with("__")) return why = "reserved label name " + name, false;
    if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
      return why = "label " + name + " lacks =\"", false;
    i += 2;
    std::string value;
    for (;;) {
      if (i >= line.size()) return why = "unterminated label value", false;
      const char c = line[i++];
      if (c == '"') break;
      if (c == '\\') {
        if (i >= line.size()) return why = "dangling backslash", false;
        const char e = line[i++];
        if (e == '\\')
          value += '\\';
        else if (e == '"')
          value += '"';
        else if (e == 'n')
          value += '\n';
        else
          return why = std::string("bad escape \\") + e, false;
        continue;
      }
      if (c == '\n') return why = "raw newline in a label value", false;
      value += c;
    }
    if (!labels.emplace(name, std::move(value)).second)
      return why = "label " + name + " twice", false;
    if (i < line.size() && line[i] == ',') {
      ++i;
      continue;
    }
    if (i < line.size() && line[i] == '}') {
      ++i;
      return true;
    }
    return why = "expected , or } after a label", false;
  }
}

inline std::string series_key(const std::string& name,
                              const std::map<std::string, std::string>& labels,
                              const char* skip = nullptr) {
  std::string k = name + "{";
  for (const auto& [n, v] : labels) {
    if (skip && n == skip) continue;
    k += n + "=" + v + "\x1f";
  }
  return k + "}";
}

}  // namespace detail

/// Parses `text`; every problem found is in the result's `errors`.
inline exposition parse(const std::string& text) {
  exposition out;
  auto error = [&](int line, const std::string& what, std::string_view content) {
    out.errors.push_back("line " + std::to_string(line) + ": " + what + ": " +
                         std::string(content.substr(0, 200)));
  };
  if (!text.empty() && text.back() != '\n') error(0, "the text does not end with a newline", "");
  std::set<std::string> finished;  // families whose samples ended
  std::set<std::string> series;
  std::string current;  // family of the last sample
  std::set<std::string> sampled;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty()) {
      error(line_no, "empty line", line);
      continue;
    }
    if (line[0] == '#') {
      const bool help = line.starts_with("# HELP ");
      const bool type = line.starts_with("# TYPE ");
      if (!help && !type) continue;  // a plain comment
      const std::string_view rest = line.substr(7);
      const std::size_t sp = rest.find(' ');
      const std::string name(rest.substr(0, sp));
      if (!detail::metric_name(name) || sp == std::string_view::npos) {
        error(line_no, help ? "bad HELP" : "bad TYPE", line);
        continue;
      }
      const std::string_view arg = rest.substr(sp + 1);
      family& f = out.families[name];
      if (help) {
        if (f.has_help) error(line_no, "second HELP for " + name, line);
        f.has_help = true;
        std::string doc;
        for (std::size_t i = 0; i < arg.size(); ++i) {
          if (arg[i] != '\\') {
            doc += arg[i];
            continue;
          }
          if (i + 1 < arg.size() && (arg[i + 1] == '\\' || arg[i + 1] == 'n')) {
            doc += arg[i + 1] == 'n' ? '\n' : '\\';
            ++i;
          } else {
            error(line_no, "bad escape in HELP", line);
          }
        }
        f.help = doc;
      } else {
        if (!f.type.empty()) error(line_no, "second TYPE for " + name, line);
        if (sampled.count(name)) error(line_no, "TYPE after samples of " + name, line);
        if (arg != "counter" && arg != "gauge" && arg != "histogram" && arg != "summary" &&
            arg != "untyped")
          error(line_no, "unknown type", line);
        f.type = std::string(arg);
      }
      continue;
    }
    sample s;
    s.line = line_no;
    std::size_t i = 0;
    while (i < line.size() && detail::name_char(line[i])) ++i;
    s.name = std::string(line.substr(0, i));
    if (!detail::metric_name(s.name)) {
      error(line_no, "bad metric name", line);
      continue;
    }
    std::string why;
    if (i < line.size() && line[i] == '{' && !detail::parse_labels(line, i, s.labels, why)) {
      error(line_no, why, line);
      continue;
    }
    if (i >= line.size() || line[i] != ' ') {
      error(line_no, "expected a space before the value", line);
      continue;
    }
    ++i;
    const std::string_view tail = line.substr(i);
    const std::size_t sp = tail.find(' ');
    const std::optional<double> v = detail::parse_float(tail.substr(0, sp));
    if (!v) {
      error(line_no, "bad value", line);
      continue;
    }
    if (sp != std::string_view::npos && !detail::integer(tail.substr(sp + 1))) {
      error(line_no, "bad timestamp", line);
      continue;
    }
    s.value = *v;
    const std::string fam = out.family_of(s.name);
    auto f = out.families.find(fam);
    if (f == out.families.end() || f->second.type.empty()) {
      error(line_no, "no TYPE for the family of " + s.name, line);
    } else {
      const std::string& t = f->second.type;
      if (t == "counter" && (std::isnan(s.value) || s.value < 0))
        error(line_no, "negative or NaN counter", line);
      if (t == "histogram" && s.name == fam)
        error(line_no, "histogram sample without suffix", line);
      if (t == "histogram" && s.name == fam + "_bucket" && !s.labels.count("le"))
        error(line_no, "bucket without le", line);
    }
    if (fam != current) {
      if (finished.count(fam)) error(line_no, "samples of " + fam + " are not contiguous", line);
      if (!current.empty()) finished.insert(current);
      current = fam;
    }
    sampled.insert(fam);
    if (!series.insert(detail::series_key(s.name, s.labels)).second)
      error(line_no, "series appears twice", line);
    out.samples.push_back(std::move(s));
  }

  // Histograms, series by series (the labels but le).
  struct hist {
    std::vector<std::pair<double, double>> buckets;  // le, count, in order of appearance
    bool inf = false;
    double inf_count = 0;
    std::optional<double> count, sum;
    int line = 0;
  };
  std::map<std::string, hist> hists;
  for (const sample& s : out.samples) {
    const std::string fam = out.family_of(s.name);
    auto f = out.families.find(fam);
    if (f == out.families.end() || f->second.type != "histogram") continue;
    hist& h = hists[detail::series_key(fam, s.labels, "le")];
    h.line = s.line;
    if (s.name == fam + "_bucket") {
      auto le = s.labels.find("le");
      if (le == s.labels.end()) continue;
      const std::optional<double> bound = detail::parse_float(le->second);
      if (!bound || std::isnan(*bound)) {
        error(s.line, "bad le", le->second);
        continue;
      }
      if (!h.buckets.empty() && *bound <= h.buckets.back().first)
        error(s.line, "le not increasing", le->second);
      if (!h.buckets.empty() && s.value < h.buckets.back().second)
        error(s.line, "bucket counts decrease (not cumulative)", s.name);
      h.buckets.emplace_back(*bound, s.value);
      if (std::isinf(*bound) && *bound > 0) {
        h.inf = true;
        h.inf_count = s.value;
      }
    } else if (s.name == fam + "_count") {
      h.count = s.value;
    } else if (s.name == fam + "_sum") {
      h.sum = s.value;
    }
  }
  for (const auto& [key, h] : hists) {
    if (!h.inf) error(h.line, "histogram without le=\"+Inf\"", key);
    if (!h.buckets.empty() && !(std::isinf(h.buckets.back().first)))
      error(h.line, "last bucket is not +Inf", key);
    if (!h.count) error(h.line, "histogram without _count", key);
    if (!h.sum) error(h.line, "histogram without _sum", key);
    if (h.count && h.inf && *h.count != h.inf_count)
      error(h.line, "+Inf bucket differs from _count", key);
  }
  return out;
}

}  // namespace delayq_test::prom
