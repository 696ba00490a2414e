#include "server_app.hpp"

#include <boost/asio/ip/address.hpp>
#include <stdexcept>
#include <thread>

#include "api/api_router.hpp"
#include "delayq/log.hpp"
#include "delayq/open_store.hpp"
#include "http/http_server.hpp"
#include "pull/lease_broker.hpp"
#include "push/push_client.hpp"
#include "push/push_registry.hpp"

namespace delayq::server {

using tcp = boost::asio::ip::tcp;

tcp::endpoint parse_listen(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size())
    throw std::invalid_argument("--listen wants ADDR:PORT, got \"" + text + "\"");
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(port_text, &used);
    if (used != port_text.size() || port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    throw std::invalid_argument("--listen: bad port \"" + port_text + "\"");
  }
  boost::system::error_code ec;
  const auto addr = boost::asio::ip::make_address(host, ec);
  if (ec) throw std::invalid_argument("--listen: \"" + host + "\" is not an IP address");
  return {addr, static_cast<unsigned short>(port)};
}

// Declared in the order they must be built; destroyed the other way round.
struct server_app::parts {
  std::unique_ptr<task_store> settings_store;  // push targets, health probes
  std::unique_ptr<push_registry> registry;
  std::unique_ptr<push_client> pusher;
  std::unique_ptr<lease_broker> broker;
  std::unique_ptr<delayq::engine> engine;
  std::unique_ptr<api_router> router;
  std::unique_ptr<http_server> http;
};

server_app::server_app(server_options options)
    : options_(std::move(options)), p_(std::make_unique<parts>()) {}

server_app::~server_app() {
  if (p_->engine) p_->engine->stop(std::chrono::seconds{0});
  io_.stop();
}

tcp::endpoint server_app::start() {
  const tcp::endpoint at = parse_listen(options_.listen);
  if (!at.address().is_loopback() && options_.token.empty())
    throw std::invalid_argument("refusing to listen on " + options_.listen +
                                " without a token: anyone who reaches it could add and delete "
                                "tasks. Give --token (or DELAYQ_TOKEN), or listen on loopback.");
  const std::string uri = options_.store.empty() ? default_store_uri() : options_.store;

  auto& p = *p_;
  // The settings get a connection of their own, so a slow settings call
  // never waits behind the engine's writes (and the other way round).
  boost::system::error_code ec;
  p.settings_store = open_store(uri, ec);
  if (ec) throw std::runtime_error("store " + uri + ": " + ec.message());
  p.registry = std::make_unique<push_registry>(*p.settings_store);
  p.registry->load(ec);
  if (ec) throw std::runtime_error("store " + uri + ": loading push targets: " + ec.message());
  for (const std::string& spec : options_.push) {
    const std::size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--push wants TYPE=URL, got \"" + spec + "\"");
    push_target t;
    t.url = spec.substr(eq + 1);
    p.registry->put(spec.substr(0, eq), t, ec);
    if (ec) throw std::invalid_argument("--push " + spec + ": " + ec.message());
  }
  p.pusher = std::make_unique<push_client>(io_.get_executor());
  p.broker = std::make_unique<lease_broker>(io_.get_executor());

  // Every type goes to the fallback: pushed when it has a target, else
  // offered to consumers. Both end the attempt through its completion.
  executor_factory executors;
  executors.set_fallback_async([&p](const task& t, attempt_completion done) {
    if (auto target = p.registry->find(t.type)) {
      p.pusher->deliver(t.type, *target, t,
                        [done](std::string failure) { done(std::move(failure)); });
    } else {
      p.broker->offer(t, std::move(done));
    }
  });
  engine_options eo;
  eo.tick = options_.tick;
  eo.workers = options_.workers;
  eo.retry = options_.retry;
  auto store = open_store(uri, ec);
  if (ec) throw std::runtime_error("store " + uri + ": " + ec.message());
  p.engine = std::make_unique<delayq::engine>(io_, std::move(executors), std::move(store), eo);
  p.engine->start(ec);
  if (ec) throw std::runtime_error("starting the engine on " + uri + ": " + ec.message());

  api_parts ap;
  ap.engine = p.engine.get();
  ap.broker = p.broker.get();
  ap.registry = p.registry.get();
  ap.pusher = p.pusher.get();
  ap.token = options_.token;
  ap.store_healthy = [store = p.settings_store.get()] {
    boost::system::error_code probe;
    store->load_settings(probe);
    return !probe;
  };
  p.router = std::make_unique<api_router>(std::move(ap), 8);

  http_limits limits;
  limits.max_body = options_.max_body;
  limits.watch_disconnect = &api_router::is_long_poll;
  p.http = std::make_unique<http_server>(
      io_,
      [router = p.router.get()](http_request&& req, http_respond respond) {
        router->handle(std::move(req), std::move(respond));
      },
      limits);
  tcp::endpoint bound;
  try {
    bound = p.http->listen(at);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("listening on " + options_.listen + ": " + e.code().message());
  }
  p.http->start();
  return bound;
}

void server_app::run() {
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < options_.io_threads; ++i) threads.emplace_back([this] { io_.run(); });
  io_.run();
  for (std::thread& t : threads) t.join();
}

void server_app::drain(std::chrono::milliseconds grace) {
  auto& p = *p_;
  if (!p.http) {
    io_.stop();
    return;
  }
  p.http->drain();
  // Long polls would hold the drain for up to a minute: answer them now.
  p.broker->stop_waiting();
  const auto until = std::chrono::steady_clock::now() + grace;
  while (p.http->in_flight() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  // What was not finished goes back to the store's keeping: delivered again
  // after the restart.
  p.broker->close();
  p.pusher->stop();
  if (!p.engine->stop(grace)) log(log_level::warning, "drain: attempts still running at exit");
  p.router->join();
  p.http->close_all();
  io_.stop();
}

}  // namespace delayq::server
