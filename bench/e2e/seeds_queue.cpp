// seeds_queue.cpp - see seeds_queue.hpp.
#include "seeds_queue.hpp"

#include <cstdlib>
#include <stdexcept>

namespace delayq::bench {
namespace {

// Seed 003's mover: take what is due out of the sorted set atomically, so two
// pollers never get the same id, and return it.
constexpr std::string_view move_due_script = R"lua(
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
return ids
)lua";

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t due_of(std::string_view body) {
  constexpr std::string_view key = "\"delayTime\":";
  const std::size_t p = body.find(key);
  if (p == std::string_view::npos) throw std::runtime_error("seeds_queue: body without delayTime");
  return std::strtoll(std::string(body.substr(p + key.size(), 20)).c_str(), nullptr, 10);
}

}  // namespace

seeds_queue::seeds_queue(redis_options server, options o, handler run, chunk_done done)
    : server_(std::move(server)),
      options_(std::move(o)),
      run_(std::move(run)),
      done_(std::move(done)),
      jobs_key_("{" + options_.prefix + "}:jobs"),
      due_key_("{" + options_.prefix + "}:due") {}

seeds_queue::~seeds_queue() { stop(); }

void seeds_queue::start() {
  threads_.emplace_back([this] { poll_loop(); });
  for (std::size_t i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { work_loop(); });
}

void seeds_queue::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::uint64_t seeds_queue::polls() const {
  std::lock_guard lock(mutex_);
  return polls_;
}

std::string seeds_queue::make_body(std::string_view id, std::string_view type,
                                   std::string_view params, std::int64_t due_ms) {
  std::string b;
  b.reserve(80 + id.size() + type.size() + params.size());
  b += "{\"taskId\":\"";
  b += id;
  b += "\",\"taskType\":\"";
  b += type;
  b += "\",\"delayTime\":";
  b += std::to_string(due_ms);
  b += ",\"params\":\"";
  b += params;
  b += "\"}";
  return b;
}

void seeds_queue::clear(redis_client& conn, const options& o) {
  const std::string jobs = "{" + o.prefix + "}:jobs", due = "{" + o.prefix + "}:due";
  conn.command({"UNLINK", jobs, due});
}

seeds_queue::producer::producer(const redis_options& server, const options& o)
    : conn_(server), jobs_key_("{" + o.prefix + "}:jobs"), due_key_("{" + o.prefix + "}:due") {}

void seeds_queue::producer::add(std::string_view id, std::string_view type, std::string_view params,
                                std::int64_t due_ms) {
  body_ = make_body(id, type, params, due_ms);
  const std::string score = std::to_string(due_ms);
  conn_.append({"MULTI"});
  conn_.append({"HSET", jobs_key_, id, body_});
  conn_.append({"ZADD", due_key_, score, id});
  conn_.append({"EXEC"});
  for (int i = 0; i < 4; ++i) conn_.get_reply();  // throws on an error reply
}

void seeds_queue::poll_loop() {
  redis_client conn(server_);
  const redis_reply loaded = conn.command({"SCRIPT", "LOAD", move_due_script});
  const std::string sha(loaded->str, loaded->len);
  const std::string limit = std::to_string(options_.batch);
  std::vector<std::string_view> hmget;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      ++polls_;
    }
    const std::string now = std::to_string(now_ms());
    const redis_reply ids = conn.command({"EVALSHA", sha, "1", due_key_, now, limit});
    const std::size_t n = ids->elements;
    if (n > 0) {
      hmget.assign({"HMGET", jobs_key_});
      for (std::size_t i = 0; i < n; ++i)
        hmget.emplace_back(ids->element[i]->str, ids->element[i]->len);
      const redis_reply bodies = conn.command(hmget);
      // One chunk per worker, so the workers share a big poll.
      const std::size_t chunks = std::min(n, options_.workers);
      std::vector<std::vector<job>> out(chunks);
      for (std::size_t i = 0; i < n; ++i) {
        const redisReply* b = bodies->element[i];
        if (b->type != REDIS_REPLY_STRING) continue;  // deleted meanwhile: the seeds skip it too
        out[i % chunks].push_back({std::string(ids->element[i]->str, ids->element[i]->len),
                                   due_of(std::string_view(b->str, b->len))});
      }
      {
        std::lock_guard lock(mutex_);
        for (auto& c : out)
          if (!c.empty()) chunks_.push_back(std::move(c));
      }
      wake_.notify_all();
    }
    if (n == options_.batch) continue;  // more may be due right now: poll again
    // The design under test: sleep P, however soon the next job is due.
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, options_.period, [&] { return stopping_; });
  }
}

void seeds_queue::work_loop() {
  redis_client conn(server_);
  std::vector<std::string_view> hdel;
  for (;;) {
    std::vector<job> chunk;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !chunks_.empty(); });
      if (chunks_.empty()) return;  // stopping
      chunk = std::move(chunks_.front());
      chunks_.pop_front();
    }
    for (const job& j : chunk) run_(j.id, j.due_ms);
    hdel.assign({"HDEL", jobs_key_});
    for (const job& j : chunk) hdel.emplace_back(j.id);
    conn.command(hdel);
    done_(chunk.size());
  }
}

}  // namespace delayq::bench
