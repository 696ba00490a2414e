// scenarios.cpp - the measurements, each a set of coroutines on one thread.
#include "scenarios.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>

namespace delayq::bench_server {

namespace {

double micros(clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

using client_list = std::vector<std::unique_ptr<queue_client>>;

// Runs loop(i) for every client i as a coroutine until all have returned, or
// until `deadline`, when every connection is closed (their coroutines then
// fail and end). An error ends only the loop that met it. Errors after
// `*quiet` became true are expected (the run closed the connections) and not
// counted.
void run_loops(asio::io_context& io, client_list& clients,
               const std::function<asio::awaitable<void>(std::size_t)>& loop,
               clock::time_point deadline, error_log& errors, const bool* quiet = nullptr) {
  asio::steady_timer watchdog(io, deadline);
  bool timed_out = false;
  std::size_t live = clients.size();
  watchdog.async_wait([&](boost::system::error_code ec) {
    if (ec) return;
    timed_out = true;
    for (auto& c : clients) c->close();
  });
  for (std::size_t i = 0; i < clients.size(); ++i) {
    asio::co_spawn(io, loop(i), [&](std::exception_ptr e) {
      if (e && !timed_out && !(quiet && *quiet)) errors.add(what_of(e));
      if (--live == 0) watchdog.cancel();
    });
  }
  io.restart();
  io.run();
  if (timed_out) errors.add("timed out: still running at the deadline");
}

client_list open_clients(asio::io_context& io, const target& t, int n, error_log& errors) {
  client_list clients;
  for (int i = 0; i < n; ++i) clients.push_back(make_client(t, io.get_executor()));
  run_loops(
      io, clients, [&](std::size_t i) -> asio::awaitable<void> { co_await clients[i]->connect(); },
      clock::now() + std::chrono::seconds(10), errors);
  return clients;
}

void close_all(client_list& clients) {
  for (auto& c : clients) c->close();
}

std::string filler(std::size_t n) {
  std::string s(n, 'x');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

// The send time travels in the payload: 20 decimal digits of steady_clock
// nanoseconds, then filler up to the payload size.
std::string stamped_payload(clock::time_point sent, std::size_t bytes) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%020lld",
                static_cast<long long>(sent.time_since_epoch().count()));
  std::string p(digits);
  if (bytes > p.size()) p += filler(bytes - p.size());
  return p;
}

bool read_stamp(const std::string& payload, clock::time_point& sent) {
  if (payload.size() < 20) return false;
  long long v = 0;
  for (std::size_t i = 0; i < 20; ++i) {
    const char c = payload[i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  sent = clock::time_point(clock::duration(v));
  return true;
}

}  // namespace

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q / 100.0 * static_cast<double>(v.size()));
  const std::size_t i = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

throughput_result run_puts(asio::io_context& io, const target& t, const throughput_config& cfg) {
  throughput_result r;
  client_list clients = open_clients(io, t, cfg.connections, r.errors);
  if (r.errors.count) return r;
  const std::string payload = filler(cfg.payload_bytes);
  const clock::time_point begin = clock::now() + cfg.warmup;
  const clock::time_point end = begin + cfg.window;
  r.latency_us.reserve(1 << 16);
  run_loops(
      io, clients,
      [&](std::size_t i) -> asio::awaitable<void> {
        queue_client& c = *clients[i];
        for (;;) {
          const clock::time_point t0 = clock::now();
          co_await c.put(cfg.type, payload, cfg.delay_ms);
          const clock::time_point t1 = clock::now();
          if (t1 >= end) co_return;
          if (t1 >= begin) {
            ++r.ops;
            r.latency_us.push_back(micros(t1 - t0));
          }
        }
      },
      end + cfg.timeout, r.errors);
  close_all(clients);
  r.per_s = static_cast<double>(r.ops) / std::chrono::duration<double>(cfg.window).count();
  return r;
}

throughput_result run_cycles(asio::io_context& io, const target& t, const throughput_config& cfg) {
  throughput_result r;
  client_list clients = open_clients(io, t, cfg.connections, r.errors);
  if (r.errors.count) return r;
  const std::string payload = filler(cfg.payload_bytes);
  const clock::time_point begin = clock::now() + cfg.warmup;
  const clock::time_point end = begin + cfg.window;
  r.latency_us.reserve(1 << 14);
  run_loops(
      io, clients,
      [&](std::size_t i) -> asio::awaitable<void> {
        queue_client& c = *clients[i];
        job j;
        for (;;) {
          const clock::time_point t0 = clock::now();
          co_await c.put(cfg.type, payload, 0);
          // Every connection puts before it reserves, so a job is ready for
          // each reserve; a miss means the job was not ready within 1 s.
          if (!co_await c.reserve(cfg.type, 1000, j)) {
            ++r.empty_reserves;
            continue;
          }
          co_await c.remove(j);
          const clock::time_point t1 = clock::now();
          if (t1 >= end) co_return;
          if (t1 >= begin) {
            ++r.ops;
            r.latency_us.push_back(micros(t1 - t0));
          }
        }
      },
      end + cfg.timeout, r.errors);
  close_all(clients);
  r.per_s = static_cast<double>(r.ops) / std::chrono::duration<double>(cfg.window).count();
  return r;
}

lateness_result run_lateness(asio::io_context& io, const target& t, const lateness_config& cfg) {
  lateness_result r;
  const int n = cfg.producers + cfg.consumers;
  client_list clients = open_clients(io, t, n, r.errors);
  if (r.errors.count) return r;
  // The consumers start first (their first reserve subscribes to the type);
  // the producers' first put goes out 100 ms later.
  const clock::time_point start = clock::now() + std::chrono::milliseconds(100);
  const auto spacing = std::chrono::duration<double>(1.0 / cfg.rate);
  const clock::time_point last_due =
      start + std::chrono::duration_cast<clock::duration>(spacing * cfg.jobs) +
      std::chrono::milliseconds(cfg.delay_ms);
  const auto delay = std::chrono::milliseconds(cfg.delay_ms);
  bool done = false;
  r.lateness_ms.reserve(static_cast<std::size_t>(cfg.jobs));
  run_loops(
      io, clients,
      [&](std::size_t i) -> asio::awaitable<void> {
        queue_client& c = *clients[i];
        if (static_cast<int>(i) < cfg.producers) {
          asio::steady_timer pace(io);
          for (int k = static_cast<int>(i); k < cfg.jobs; k += cfg.producers) {
            const clock::time_point due =
                start + std::chrono::duration_cast<clock::duration>(spacing * k);
            if (clock::now() < due) {
              pace.expires_at(due);
              co_await pace.async_wait(asio::use_awaitable);
            }
            const clock::time_point sent = clock::now();
            co_await c.put(cfg.type, stamped_payload(sent, cfg.payload_bytes), cfg.delay_ms);
            r.put_us.push_back(micros(clock::now() - sent));
            ++r.sent;
          }
          co_return;
        }
        job j;
        while (!done) {
          if (!co_await c.reserve(cfg.type, 1000, j)) continue;
          const clock::time_point got = clock::now();
          clock::time_point sent;
          if (read_stamp(j.payload, sent)) {
            r.lateness_ms.push_back(
                std::chrono::duration<double, std::milli>(got - (sent + delay)).count());
          } else {
            ++r.foreign;
          }
          co_await c.remove(j);
          if (++r.received == static_cast<std::uint64_t>(cfg.jobs)) {
            // Every job came: end the other consumers' long polls.
            done = true;
            for (int k = cfg.producers; k < n; ++k) {
              if (static_cast<std::size_t>(k) != i) clients[static_cast<std::size_t>(k)]->close();
            }
          }
        }
      },
      last_due + cfg.timeout, r.errors, &done);
  close_all(clients);
  if (r.received < static_cast<std::uint64_t>(cfg.jobs)) {
    r.errors.add("received " + std::to_string(r.received) + " of " + std::to_string(cfg.jobs) +
                 " jobs");
  }
  return r;
}

}  // namespace delayq::bench_server
