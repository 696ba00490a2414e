// redis_client.cpp - see redis_client.hpp.
#include "redis_client.hpp"

#include <sys/time.h>

#include <cstdlib>
#include <stdexcept>

namespace delayq::bench {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

redis_client::redis_client(const redis_options& o) {
  const timeval connect = to_timeval(o.connect_timeout);
  ctx_ = o.unix_socket.empty()
             ? redisConnectWithTimeout(o.host.c_str(), static_cast<int>(o.port), connect)
             : redisConnectUnixWithTimeout(o.unix_socket.c_str(), connect);
  if (ctx_ == nullptr || ctx_->err != 0) {
    std::string why = ctx_ != nullptr ? ctx_->errstr : "out of memory";
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
    throw std::runtime_error("cannot connect to Redis at " + o.address() + ": " + why);
  }
  // The benchmark's commands are short; a long stall means a hung server, and
  // a hang should end the run with a message rather than block CI.
  redisSetTimeout(ctx_, to_timeval(std::chrono::milliseconds(30'000)));
  if (!o.password.empty()) {
    if (o.user.empty())
      command({"AUTH", o.password});
    else
      command({"AUTH", o.user, o.password});
  }
  if (o.db != 0) {
    const std::string db = std::to_string(o.db);
    command({"SELECT", db});
  }
}

redis_client::~redis_client() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

redis_reply redis_client::check(redisReply* r, std::string_view what) {
  if (r == nullptr)
    throw std::runtime_error("Redis " + std::string(what) + ": " +
                             (ctx_->err != 0 ? ctx_->errstr : "no reply"));
  redis_reply owned(r);
  if (owned->type == REDIS_REPLY_ERROR)
    throw std::runtime_error("Redis " + std::string(what) + ": " +
                             std::string(owned->str, owned->len));
  return owned;
}

redis_reply redis_client::command(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv(args.size());
  std::vector<std::size_t> lens(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    argv[i] = args[i].data();
    lens[i] = args[i].size();
  }
  ++sent_;
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()));
  return check(r, args.empty() ? std::string_view("command") : args[0]);
}

void redis_client::append(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv(args.size());
  std::vector<std::size_t> lens(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    argv[i] = args[i].data();
    lens[i] = args[i].size();
  }
  ++sent_;
  if (redisAppendCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()) !=
      REDIS_OK)
    throw std::runtime_error(std::string("Redis append: ") + ctx_->errstr);
}

redis_reply redis_client::get_reply() {
  void* r = nullptr;
  if (redisGetReply(ctx_, &r) != REDIS_OK)
    throw std::runtime_error(std::string("Redis reply: ") + ctx_->errstr);
  return check(static_cast<redisReply*>(r), "pipelined command");
}

std::map<std::string, std::string> parse_info(std::string_view text) {
  std::map<std::string, std::string> out;
  std::size_t p = 0;
  while (p < text.size()) {
    std::size_t e = text.find('\n', p);
    if (e == std::string_view::npos) e = text.size();
    std::string_view line = text.substr(p, e - p);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() && line.front() != '#') {
      const std::size_t colon = line.find(':');
      if (colon != std::string_view::npos)
        out.emplace(std::string(line.substr(0, colon)), std::string(line.substr(colon + 1)));
    }
    p = e + 1;
  }
  return out;
}

std::map<std::string, std::uint64_t> parse_commandstats(std::string_view text) {
  // cmdstat_zadd:calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0
  std::map<std::string, std::uint64_t> out;
  for (const auto& [key, value] : parse_info(text)) {
    if (key.rfind("cmdstat_", 0) != 0) continue;
    const std::size_t calls = value.find("calls=");
    if (calls != 0) continue;
    out[key.substr(8)] = std::strtoull(value.c_str() + 6, nullptr, 10);
  }
  return out;
}

}  // namespace delayq::bench
