#include "setting_values.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "server_app.hpp"
#include "server_settings.hpp"

namespace delayq::server {
std::string unsafe_secret_file(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return "belongs to user id " + std::to_string(st.st_uid) +
           ", neither root nor the user the server runs as: its owner could change the secret";
  if ((st.st_mode & (S_IWGRP | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("has mode ") + mode +
           ", which lets other users read or change it: chmod 600 it (or 640, its group "
           "being the server's)";
  }
  return {};
}

std::int64_t whole(const std::string& text, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || p != end || v < lo || v > hi)
    throw config_error("wants a whole number from " + std::to_string(lo) + " to " +
                       std::to_string(hi) + ", got \"" + text + "\"");
  return v;
}

std::chrono::milliseconds duration_within(const std::string& text, std::chrono::milliseconds lo,
                                          std::chrono::milliseconds hi, const char* range) {
  std::chrono::milliseconds d{};
  try {
    d = parse_duration(text);
  } catch (const std::invalid_argument& e) {
    throw config_error(e.what());
  }
  if (d < lo || d > hi) throw config_error(std::string("must be from ") + range + ", got " + text);
  return d;
}

std::string show_duration(std::chrono::milliseconds d) {
  const auto n = d.count();
  if (n != 0 && n % 3'600'000 == 0) return std::to_string(n / 3'600'000) + "h";
  if (n != 0 && n % 60'000 == 0) return std::to_string(n / 60'000) + "m";
  if (n % 1000 == 0) return std::to_string(n / 1000) + "s";
  return std::to_string(n) + "ms";
}

std::string without_flag(std::string message, std::string_view flag) {
  if (message.starts_with(flag)) {
    message.erase(0, flag.size());
    while (!message.empty() && (message.front() == ':' || message.front() == ' '))
      message.erase(0, 1);
  }
  return message;
}

std::string read_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw config_error(path + ": cannot read it: " + std::strerror(errno));
  struct stat st {};
  std::string why;
  std::string text;
  if (::fstat(fd, &st) != 0) {
    why = std::string("cannot stat it: ") + std::strerror(errno);
  } else if (why = unsafe_secret_file(st); why.empty()) {
    if (st.st_size > 4096) {
      why = "is over 4096 bytes: not a secret file";
    } else {
      char buf[4097];
      ssize_t n = 0;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
      if (n < 0) why = std::string("cannot read it: ") + std::strerror(errno);
    }
  }
  ::close(fd);
  if (!why.empty()) throw config_error(path + " " + why);
  if (text.ends_with('\n')) text.pop_back();
  if (text.ends_with('\r')) text.pop_back();
  if (text.empty()) throw config_error(path + " is empty");
  for (const char ch : text)
    if (ch < 0x21 || ch > 0x7e)
      throw config_error(path +
                         " holds a byte a bearer token cannot carry (printable ASCII without "
                         "spaces only; one line end at the end is allowed)");
  return text;
}

}  // namespace delayq::server
