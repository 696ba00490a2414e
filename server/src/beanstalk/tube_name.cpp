// beanstalk/tube_name.cpp - see tube_name.hpp.
#include "beanstalk/tube_name.hpp"

namespace delayq::server::beanstalk {

namespace {

// Letters, digits, '-', '.', '_': in both alphabets, standing for themselves.
bool is_shared_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// The tube-only characters, escaped in a type as ':' and two hex digits.
bool is_escaped_name_char(char c) {
  return c == '+' || c == '/' || c == ';' || c == '$' || c == '(' || c == ')';
}

constexpr char upper_hex[] = "0123456789ABCDEF";

int upper_hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // lowercase too: the mapping writes uppercase only
}

}  // namespace

bool is_tube_name_char(char c) noexcept {
  return is_shared_name_char(c) || is_escaped_name_char(c);
}

bool is_valid_tube_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_tube_name_length || name.front() == '-') return false;
  for (char c : name)
    if (!is_tube_name_char(c)) return false;
  return true;
}

std::optional<std::string> type_of_tube(std::string_view tube) {
  if (!is_valid_tube_name(tube)) return std::nullopt;
  std::string type;
  type.reserve(tube.size());
  for (char c : tube) {
    if (is_shared_name_char(c)) {
      type += c;
    } else {
      const auto u = static_cast<unsigned char>(c);
      type += ':';
      type += upper_hex[u >> 4];
      type += upper_hex[u & 0xF];
    }
    if (type.size() > max_type_length) return std::nullopt;
  }
  return type;
}

std::optional<std::string> tube_of_type(std::string_view type) {
  if (type.empty() || type.size() > max_type_length) return std::nullopt;
  std::string tube;
  tube.reserve(type.size());
  for (std::size_t i = 0; i < type.size(); ++i) {
    const char c = type[i];
    if (is_shared_name_char(c)) {
      tube += c;
      continue;
    }
    if (c != ':' || type.size() - i < 3) return std::nullopt;  // ':' and two digits
    const int hi = upper_hex_value(type[i + 1]);
    const int lo = upper_hex_value(type[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    const char decoded = static_cast<char>(hi * 16 + lo);
    if (!is_escaped_name_char(decoded)) return std::nullopt;
    tube += decoded;
    i += 2;
  }
  if (!is_valid_tube_name(tube)) return std::nullopt;
  return tube;
}

}  // namespace delayq::server::beanstalk
