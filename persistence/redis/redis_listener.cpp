// detail::redis::shards_role::listen(): the notices of saved tasks in the sharded layout.
//
// The sharded write script PUBLISHes "SHARD DUE_MS ID" on `PREFIX:notify`
// for every save and revive (scripts.hpp), and save_setting/erase_setting
// "setting KEY" (redis_store.cpp). A listener holds a connection of
// its own, SUBSCRIBEd to that channel (on a Redis Cluster, to the first
// seed that answers: a classic PUBLISH reaches every node). wait() polls the
// socket and an eventfd together, so close() from another thread wakes it
// at once; hiredis only parses what wait() read (redisBufferRead once poll
// says the socket is readable, then redisGetReplyFromReader), so no call
// blocks past the deadline.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "redis_backend.hpp"
#include "redis_shards.hpp"

namespace delayq {

using detail::redis::backend;
namespace {

using detail::redis::command;
using detail::redis::context_ptr;
using detail::redis::redis_failure;
using detail::redis::reply_ptr;
using detail::redis::reply_text;

timeval to_tv(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// "SHARD DUE_MS ID": the id is everything after the second space; or
// "setting KEY" (redis_store.cpp, setting_notice).
bool parse_notice(std::string_view s, task_notice& out) {
  constexpr std::string_view setting = "setting ";
  if (s.starts_with(setting)) {
    if (s.size() == setting.size()) return false;
    out.kind = notice_kind::setting;
    out.id = std::string(s.substr(setting.size()));
    return true;
  }
  const auto sp1 = s.find(' ');
  if (sp1 == std::string_view::npos) return false;
  const auto sp2 = s.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return false;
  const char* b = s.data();
  if (std::from_chars(b, b + sp1, out.shard).ptr != b + sp1) return false;
  // The score as the script got it: whole milliseconds, possibly signed.
  if (std::from_chars(b + sp1 + 1, b + sp2, out.due_ms).ptr != b + sp2) return false;
  out.id = std::string(s.substr(sp2 + 1));
  return true;
}

// Thread safety: as task_listener: wait() from one thread at a time (it
// alone touches the connection); close() from any thread (an atomic flag and
// a write to the eventfd).
class redis_listener final : public task_listener {
 public:
  redis_listener(const redis_options& opts, std::string name)
      : opts_(opts), name_(std::move(name)), channel_(opts.prefix + ":notify") {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  ~redis_listener() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }
  redis_listener(const redis_listener&) = delete;
  redis_listener& operator=(const redis_listener&) = delete;

  /// Dials a node and subscribes. Throws redis_failure.
  void connect() {
    ctx_.reset();
    if (wake_fd_ < 0) throw redis_failure{errc::store_error, "eventfd failed"};
    std::vector<std::pair<std::string, unsigned>> nodes = opts_.seeds;
    if (nodes.empty()) nodes.emplace_back(opts_.host, opts_.port);
    std::string why;
    for (const auto& [host, port] : nodes) {
      try {
        dial(host, port);
        return;
      } catch (const redis_failure& f) {
        why = f.message;
      }
    }
    throw redis_failure{errc::store_unavailable, why};
  }

  std::vector<task_notice> wait(std::chrono::milliseconds timeout,
                                boost::system::error_code& ec) override {
    ec = {};
    std::vector<task_notice> out;
    if (closed_.load()) {
      ec = errc::not_running;
      return out;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!ctx_) {
      try {
        detail::redis::sigpipe_guard guard;
        connect();
        log(log_level::warning, name_ + ": notice listener reconnected");
      } catch (const redis_failure& f) {
        // Not in a hot loop while the server is away: a pause (that close()
        // cuts short) before the error.
        pause(std::min(timeout, std::chrono::milliseconds{100}));
        ec = closed_.load() ? errc::not_running : errc::store_unavailable;
        log(log_level::warning, name_ + ": notice listener: " + f.message);
        return out;
      }
    }
    for (;;) {
      if (!drain(out)) {
        ec = errc::store_unavailable;
        return {};
      }
      if (!out.empty()) return out;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd fds[2] = {{ctx_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      const int n = ::poll(fds, 2, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
      if (closed_.load()) {
        ec = errc::not_running;
        return {};
      }
      if (n < 0 && errno != EINTR) {
        lose("poll failed");
        ec = errc::store_unavailable;
        return {};
      }
      if (n <= 0 || (fds[0].revents == 0)) continue;
      if (redisBufferRead(ctx_.get()) != REDIS_OK) {
        lose(ctx_->errstr[0] ? ctx_->errstr : "connection closed");
        ec = errc::store_unavailable;
        return {};
      }
    }
  }

  void close() noexcept override {
    closed_.store(true);
    const std::uint64_t one = 1;
    if (wake_fd_ >= 0) {
      [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
    }
  }

 private:
  void dial(const std::string& host, unsigned port) {
    const timeval connect_tv = to_tv(opts_.connect_timeout);
    context_ptr c(opts_.unix_socket.empty()
                      ? redisConnectWithTimeout(host.c_str(), static_cast<int>(port), connect_tv)
                      : redisConnectUnixWithTimeout(opts_.unix_socket.c_str(), connect_tv));
    if (!c) throw redis_failure{errc::store_unavailable, "out of memory for a Redis context"};
    if (c->err)
      throw redis_failure{errc::store_unavailable, "cannot connect to " + host + ":" +
                                                       std::to_string(port) + ": " + c->errstr};
    redisSetTimeout(c.get(), to_tv(opts_.command_timeout));
    if (opts_.unix_socket.empty()) redisEnableKeepAlive(c.get());
    std::vector<command> cmds;
    if (!opts_.password.empty()) {
      command auth;
      auth.arg("AUTH");
      if (!opts_.user.empty()) auth.arg(opts_.user);
      auth.arg(opts_.password);
      cmds.push_back(std::move(auth));
    }
    const std::string client_name = detail::redis::client_name_for(opts_, ":listen");
    cmds.push_back(std::move(command().arg("CLIENT").arg("SETNAME").arg(client_name)));
    cmds.push_back(std::move(command().arg("SUBSCRIBE").arg(channel_)));
    try {
      for (const command& cmd : cmds) cmd.append_to(c.get());
    } catch (const detail::redis::append_failed&) {
      throw redis_failure{errc::store_error, "out of memory while buffering commands"};
    }
    for (std::size_t i = 0; i < cmds.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(c.get(), &raw) != REDIS_OK || raw == nullptr)
        throw redis_failure{errc::store_unavailable,
                            std::string("subscribing failed: ") + c->errstr};
      reply_ptr r(static_cast<redisReply*>(raw));
      if (r->type == REDIS_REPLY_ERROR)
        throw redis_failure{errc::store_error, "subscribing failed: " + reply_text(r.get())};
    }
    ctx_ = std::move(c);
  }

  // Parses every reply already read; false when the stream is broken.
  bool drain(std::vector<task_notice>& out) {
    for (;;) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(ctx_.get(), &raw) != REDIS_OK) {
        lose("unparsable reply");
        return false;
      }
      if (!raw) return true;
      reply_ptr r(static_cast<redisReply*>(raw));
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
          reply_text(r->element[0]) != "message")
        continue;  // a subscribe confirmation, or something else to skip
      const redisReply* payload = r->element[2];
      task_notice n;
      if (payload->type == REDIS_REPLY_STRING && parse_notice({payload->str, payload->len}, n))
        out.push_back(std::move(n));
      else
        log(log_level::warning,
            name_ + ": notice listener: skipped a malformed notice '" + reply_text(payload) + "'");
    }
  }

  void lose(const std::string& why) {
    log(log_level::warning, name_ + ": notice listener lost its connection: " + why +
                                "; notices sent meanwhile are missed");
    ctx_.reset();
  }

  void pause(std::chrono::milliseconds ms) {
    pollfd fd{wake_fd_, POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(ms.count()));
  }

  redis_options opts_;
  std::string name_;
  std::string channel_;
  context_ptr ctx_;  // wait()'s only
  int wake_fd_ = -1;
  std::atomic<bool> closed_{false};
};

}  // namespace

std::unique_ptr<task_listener> detail::redis::shards_role::listen(boost::system::error_code& ec) {
  ec = {};
  const backend& m = b_;
  auto l = std::make_unique<redis_listener>(m.opts, m.name);
  try {
    detail::redis::sigpipe_guard guard;
    l->connect();
  } catch (const redis_failure& f) {
    ec = f.code;
    log(log_level::error, m.name + ": listen failed: " + f.message);
    return nullptr;
  }
  return l;
}

}  // namespace delayq
