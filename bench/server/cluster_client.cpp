// cluster_client.cpp - stats, shard-balance wait and batch scheduling over
// connection.hpp's http_connection.
#include "cluster_client.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <exception>
#include <optional>
#include <stdexcept>
#include <thread>

#include "connection.hpp"

namespace delayq::bench_server::scaleout {

namespace {

target target_of(std::uint16_t port) {
  target t;
  t.name = "delayq";
  t.host = "127.0.0.1";
  t.port = port;
  t.token = token;
  return t;
}

template <class T>
T run_sync(asio::io_context& io, asio::awaitable<T> a) {
  std::optional<T> result;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
    if (e)
      error = e;
    else
      result = std::move(v);
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// Scheduling: `connections` coroutines take batches from a shared counter
// until every task is acknowledged. What they share (they all run on one
// thread, so without a lock):
struct schedule_state {
  std::size_t count = 0;
  std::size_t batch = 0;
  std::function<std::int64_t(std::size_t)> due_of;  // task k is due then (ms since the epoch)
  std::size_t next = 0;                             // the first task not taken yet
  std::vector<std::string> ids;
  std::exception_ptr error;
};

asio::awaitable<void> schedule_worker(schedule_state* st, std::uint16_t port) {
  http_connection c(target_of(port), co_await asio::this_coro::executor);
  co_await c.connect();
  std::string body;
  while (st->next < st->count && !st->error) {
    const std::size_t first = st->next;
    const std::size_t last = std::min(st->count, first + st->batch);
    st->next = last;
    // Types and payloads are plain ASCII: no JSON library needed to write.
    body = R"({"tasks":[)";
    for (std::size_t k = first; k < last; ++k) {
      if (k != first) body += ',';
      body += R"({"type":")";
      body += task_type;
      body += R"(","payload":"p)";
      body += std::to_string(k);
      body += R"(","due_ms":)";
      body += std::to_string(st->due_of(k));
      body += '}';
    }
    body += "]}";
    const http_response r = co_await c.request("POST", "/v1/tasks:batch", body);
    if (r.status != 201) {
      throw std::runtime_error("POST /v1/tasks:batch answered " + std::to_string(r.status) + " " +
                               r.body.substr(0, 200));
    }
    // Parsed into a named value first: a range-for over a member of a
    // temporary would iterate a destroyed object (before C++23).
    const json answer = json::parse(r.body);
    for (const auto& id : answer.at("ids")) st->ids.push_back(id.get<std::string>());
  }
}

}  // namespace

json stats_of(asio::io_context& io, std::uint16_t port) {
  auto call = [](asio::any_io_executor ex, std::uint16_t p) -> asio::awaitable<http_response> {
    http_connection c(target_of(p), ex);
    co_await c.connect();
    co_return co_await c.request("GET", "/v1/stats", "");
  };
  const http_response r = run_sync(io, call(io.get_executor(), port));
  if (r.status != 200) {
    throw std::runtime_error("GET /v1/stats answered " + std::to_string(r.status) + " " + r.body);
  }
  return json::parse(r.body);
}

double wait_all_shards_held(asio::io_context& io, const instances& in, int shards,
                            std::chrono::seconds guard) {
  const auto start = steady::now();
  for (;;) {
    int sum = 0;
    bool each = true;
    for (const auto& s : in) {
      const int held = stats_of(io, s->port()).value("shards_held", -1);
      sum += held;
      each = each && held > 0;
    }
    if (each && sum == shards) return seconds_between(start, steady::now());
    check_alive(in);
    if (steady::now() - start > guard) {
      throw std::runtime_error("the instances did not come to hold all " + std::to_string(shards) +
                               " shards within " + std::to_string(guard.count()) + " s (last sum " +
                               std::to_string(sum) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll, not a wait
  }
}

schedule_result schedule_tasks(asio::io_context& io, const instances& in, std::size_t count,
                               std::size_t batch, int connections,
                               std::function<std::int64_t(std::size_t)> due_of) {
  schedule_state st;
  st.count = count;
  st.batch = batch;
  st.due_of = std::move(due_of);
  st.ids.reserve(count);
  const auto start = steady::now();
  for (int i = 0; i < connections; ++i) {
    asio::co_spawn(io, schedule_worker(&st, in[static_cast<std::size_t>(i) % in.size()]->port()),
                   [&st](std::exception_ptr e) {
                     if (e && !st.error) st.error = e;
                   });
  }
  io.restart();
  io.run();
  schedule_result out;
  out.seconds = seconds_between(start, steady::now());
  if (st.error) std::rethrow_exception(st.error);
  if (st.ids.size() != count) {
    throw std::runtime_error(std::to_string(st.ids.size()) + " ids acknowledged for " +
                             std::to_string(count) + " tasks sent");
  }
  out.ids = std::move(st.ids);
  return out;
}

}  // namespace delayq::bench_server::scaleout
