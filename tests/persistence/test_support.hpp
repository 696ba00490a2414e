// Shared helpers of the persistence tests: temp dirs, the test Redis server,
// raw access to what a store wrote, and a log capture.
#pragma once

#include <utility>

#include <doctest/doctest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/task.hpp"

namespace delayq::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/delayq-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// A key prefix no other test (in this or a parallel process) uses.
inline std::string unique_prefix(const std::string& tag = "t") {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(rd() % 100000);
}

/// The test server's URI from DELAYQ_TEST_REDIS; fails the test when unset.
inline std::string redis_test_uri() {
  const char* uri = std::getenv("DELAYQ_TEST_REDIS");
  if (!uri || !*uri)
    FAIL(
        "DELAYQ_TEST_REDIS is not set: run the tests through scripts/with-redis.sh or "
        "scripts/test.sh, which start a private redis-server and set it (or export "
        "DELAYQ_TEST_REDIS=redis://127.0.0.1:PORT for a server you started yourself)");
  return uri;
}

/// The test server's options with a unique (or given) prefix.
inline redis_options redis_test_options(const std::string& prefix) {
  std::string uri = redis_test_uri();
  uri += uri.find('?') == std::string::npos ? "?prefix=" : "&prefix=";
  uri += prefix;
  return redis_options::parse(uri);
}

struct reply_free {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_free>;

/// A plain hiredis connection to the test server, for writing and reading
/// keys behind a store's back.
class raw_redis {
 public:
  raw_redis() {
    const redis_options o = redis_options::parse(redis_test_uri());
    c_ = o.unix_socket.empty() ? redisConnect(o.host.c_str(), static_cast<int>(o.port))
                               : redisConnectUnix(o.unix_socket.c_str());
    REQUIRE(c_ != nullptr);
    REQUIRE_MESSAGE(c_->err == 0, c_->errstr);
    if (!o.password.empty()) {
      if (o.user.empty())
        run({"AUTH", o.password});
      else
        run({"AUTH", o.user, o.password});
    }
    if (o.db != 0) run({"SELECT", std::to_string(o.db)});
  }
  ~raw_redis() { redisFree(c_); }
  raw_redis(const raw_redis&) = delete;
  raw_redis& operator=(const raw_redis&) = delete;

  /// Runs one binary-safe command; fails the test on an I/O error.
  reply_ptr run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    REQUIRE_MESSAGE(r != nullptr, c_->errstr);
    return reply_ptr(r);
  }

  /// A string reply as bytes; nullopt for a nil reply.
  std::optional<std::string> get(const std::vector<std::string>& args) {
    auto r = run(args);
    if (r->type == REDIS_REPLY_NIL) return std::nullopt;
    REQUIRE(r->type == REDIS_REPLY_STRING);
    return std::string(r->str, r->len);
  }

  long long integer(const std::vector<std::string>& args) {
    auto r = run(args);
    REQUIRE(r->type == REDIS_REPLY_INTEGER);
    return r->integer;
  }

  /// Deletes every key of a prefix.
  void drop_prefix(const std::string& prefix) {
    const std::string tag = "{" + prefix + "}:";
    run({"DEL", tag + "tasks", tag + "due", tag + "quarantine", tag + "quarantine:reason",
         tag + "meta", tag + "dead", tag + "dead:by_time", tag + "dead:quarantine",
         tag + "dead:quarantine:reason", tag + "settings"});
  }

  /// The connections of a store with this prefix, as CLIENT LIST shows
  /// them: each one's id and name ("delayq:PREFIX", "delayq:PREFIX:writer",
  /// ...; docs/persistence.md, "Key layout").
  std::vector<std::pair<std::string, std::string>> store_clients(const std::string& prefix) {
    auto list = get({"CLIENT", "LIST", "TYPE", "normal"});
    REQUIRE(list);
    const std::string base = "delayq:" + prefix;
    std::vector<std::pair<std::string, std::string>> out;
    std::size_t pos = 0;
    while (pos < list->size()) {
      std::size_t end = list->find('\n', pos);
      if (end == std::string::npos) end = list->size();
      const std::string line = list->substr(pos, end - pos);
      pos = end + 1;
      const std::size_t at = line.find(" name=");
      if (at == std::string::npos) continue;
      std::string name = line.substr(at + 6, line.find(' ', at + 6) - (at + 6));
      // Another store's prefix may begin with this one.
      if (name != base && !name.starts_with(base + ":")) continue;
      out.emplace_back(line.substr(3, line.find(' ') - 3), std::move(name));  // "id=N ..."
    }
    return out;
  }

  /// Kills the connections a store with this prefix holds for its calls
  /// (named "delayq:PREFIX"). Returns how many were killed.
  int kill_store_connections(const std::string& prefix) {
    int killed = 0;
    for (const auto& [id, name] : store_clients(prefix))
      if (name == "delayq:" + prefix)
        killed += static_cast<int>(integer({"CLIENT", "KILL", "ID", id}));
    return killed;
  }

 private:
  redisContext* c_ = nullptr;
};

/// Deletes a prefix's keys when the test ends, passed or not.
struct prefix_guard {
  raw_redis& raw;
  std::string prefix;
  ~prefix_guard() { raw.drop_prefix(prefix); }
};

/// Captures delayq::log() lines for the lifetime of the object.
class log_capture {
 public:
  log_capture() {
    previous_ = set_log_function([this](log_level level, std::string_view msg) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(level, std::string(msg));
    });
  }
  ~log_capture() { set_log_function(std::move(previous_)); }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;

  std::vector<std::pair<log_level, std::string>> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  bool contains(std::string_view text) const {
    std::lock_guard lock(mutex_);
    for (const auto& [level, line] : lines_)
      if (line.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  log_function previous_;
  mutable std::mutex mutex_;
  std::vector<std::pair<log_level, std::string>> lines_;
};

/// A task with every field set to something distinctive.
inline task make_task(std::string id, std::string payload = "payload",
                      std::int64_t due_ms = 1'700'000'000'123, std::uint32_t attempts = 3) {
  task t;
  t.id = std::move(id);
  t.type = "order.cancel";
  t.payload = std::move(payload);
  t.due = from_epoch_ms(due_ms);
  t.attempts = attempts;
  return t;
}

/// A dead letter of make_task(id) that died at `died_ms` with `error`.
inline dead_letter make_letter(std::string id, std::string error = "executor threw",
                               std::int64_t died_ms = 1'700'000'100'000) {
  dead_letter d;
  d.task = make_task(std::move(id));
  d.error = std::move(error);
  d.died_at = from_epoch_ms(died_ms);
  return d;
}

}  // namespace delayq::test
