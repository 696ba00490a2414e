#include "server_app.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/host_name.hpp>
#include <charconv>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "api/api_router.hpp"
#include "api/forward_call.hpp"
#include "beanstalk/job_service.hpp"
#include "beanstalk/listener.hpp"
#include "cluster/forward_marker.hpp"
#include "cluster/peer_directory.hpp"
#include "cluster/peer_forwarder.hpp"
#include "delayq/log.hpp"
#include "delayq/open_store.hpp"
#include "delayq/shard_leases.hpp"
#include "http/http_server.hpp"
#include "ops/store_health.hpp"
#include "pull/lease_broker.hpp"
#include "push/push_client.hpp"
#include "push/push_policy.hpp"
#include "push/push_registry.hpp"
#include "push/push_target.hpp"
#include "security/ip_block.hpp"
#include "wire/http_url.hpp"

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

namespace {

// The URL other instances forward calls to when --advertise is not given:
// the bound address, or the host name for a wildcard (the others cannot
// reach 0.0.0.0).
std::string advertised_url(const tcp::endpoint& bound) {
  const auto addr = bound.address();
  std::string host = addr.is_unspecified() ? boost::asio::ip::host_name() : addr.to_string();
  if (!addr.is_unspecified() && addr.is_v6()) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(bound.port());
}

}  // namespace

// Declared in the order they must be built; destroyed the other way round.
struct server_app::parts {
  std::unique_ptr<task_store> settings_store;  // push targets, health probes
  std::unique_ptr<store_health> health;        // /healthz: one probe a second
  std::unique_ptr<push_registry> registry;
  // --cluster: the instances' API addresses, and the client that forwards a
  // call on an id to its shard's owner.
  std::unique_ptr<peer_directory> peers;
  std::unique_ptr<forward_marker> marker;  // the forwarder's and the router's
  std::unique_ptr<peer_forwarder> forwarder;
  std::shared_ptr<const push_policy> push_allow;  // --push-allow
  std::unique_ptr<push_client> pusher;
  std::unique_ptr<lease_broker> broker;
  std::unique_ptr<delayq::engine> engine;
  // engine::attempt_current(), for those that hold an attempt before they
  // hand it on (the broker, the push client); true before the engine is made.
  bool attempt_current(const task& t) const {
    const delayq::engine* e = engine.get();
    return e == nullptr || e->attempt_current(t);
  }
  // --beanstalk-listen: the commands' service (once the store answered)
  // and the sockets (from start(), so clients connect at once).
  // --cluster: the beanstalk commands on another instance's job, forwarded
  // there over HTTP on a pool of their own.
  std::unique_ptr<boost::asio::thread_pool> beanstalk_pool;
  std::unique_ptr<call_forwarder> beanstalk_forward;
  std::unique_ptr<beanstalk::job_service> jobs;
  std::unique_ptr<beanstalk::listener> beanstalk;
  std::unique_ptr<request_guard> guard;  // before the listener: it asks it
  std::unique_ptr<api_router> router;
  std::unique_ptr<http_server> http;
  // Set once the store answered and everything above is built.
  std::atomic<bool> ready{false};
  // Retries bring_up() while the store is down at start.
  std::thread starter;
  std::mutex starter_mutex;
  std::condition_variable starter_cv;
  bool stopping = false;
};

struct server_app::thread_loads {
  std::mutex m;
  std::vector<std::size_t> open;  // by I/O thread
};

std::size_t io_threads_for(const server_options& options) {
  if (options.io_threads != 0) return options.io_threads;
  const std::string uri = options.store.empty() ? default_store_uri() : options.store;
  return uri.starts_with("memory:") ? 1 : 2;
}

server_app::server_app(server_options options)
    : options_(std::move(options)),
      loads_(std::make_shared<thread_loads>()),
      p_(std::make_unique<parts>()) {
  options_.io_threads = io_threads_for(options_);
  for (std::size_t i = 1; i < options_.io_threads; ++i)
    more_io_.push_back(std::make_unique<boost::asio::io_context>(1));
  loads_->open.assign(more_io_.size() + 1, 0);
}

server_app::~server_app() {
  stop_starter();
  // After a drain (the usual way here: run() has returned) the engine is
  // closed already and this returns at once; without one, io_ has not run
  // or has stopped, and close() waits for what the store still holds.
  if (p_->engine) p_->engine->close();
  stop_io();
}

connection_home server_app::next_connection_home() {
  std::size_t n = 0;
  {
    std::lock_guard lock(loads_->m);
    auto& open = loads_->open;
    for (std::size_t i = 1; i < open.size(); ++i)
      if (open[i] < open[n]) n = i;
    ++open[n];
  }
  // Handed back when the connection ends.
  std::shared_ptr<void> hold(nullptr, [loads = loads_, n](void*) {
    std::lock_guard lock(loads->m);
    --loads->open[n];
  });
  return {n == 0 ? io_.get_executor() : more_io_[n - 1]->get_executor(), std::move(hold)};
}

void server_app::stop_io() {
  io_.stop();
  for (auto& io : more_io_) io->stop();
}

void server_app::stop_starter() {
  {
    std::lock_guard lock(p_->starter_mutex);
    p_->stopping = true;
  }
  p_->starter_cv.notify_all();
  if (p_->starter.joinable()) p_->starter.join();
}

namespace {

// Errors that mean "the store is not there yet": the server listens anyway,
// answers 503, and keeps trying.
bool store_down(const boost::system::error_code& ec) {
  return ec == errc::store_unavailable || ec == errc::outcome_unknown;
}

class start_error : public std::runtime_error {
 public:
  start_error(boost::system::error_code ec, const std::string& what)
      : std::runtime_error(what), ec_(ec) {}
  boost::system::error_code code() const noexcept { return ec_; }

 private:
  boost::system::error_code ec_;
};

}  // namespace

std::chrono::milliseconds parse_duration(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string unit = text.substr(digits);
  std::int64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  // At most 9 digits: no overflow, and far past any lease.
  if (digits == 0 || digits > 9 || scale == 0)
    throw std::invalid_argument(
        "wants a whole number with a unit (ms, s, m, h), e.g. 500ms or "
        "5s; got \"" +
        text + "\"");
  return std::chrono::milliseconds{std::stoll(text.substr(0, digits)) * scale};
}

std::pair<std::string, std::size_t> parse_capacity(const std::string& spec) {
  const std::size_t eq = spec.find('=');
  std::size_t n = 0;
  const char* first = spec.data() + (eq == std::string::npos ? spec.size() : eq + 1);
  const char* last = spec.data() + spec.size();
  const auto [p, ec] = std::from_chars(first, last, n);
  if (eq == std::string::npos || eq == 0 || first == last || ec != std::errc{} || p != last ||
      n == 0)
    throw std::invalid_argument("--capacity wants TYPE=N with N a whole number from 1, got \"" +
                                spec + "\"");
  std::string type = spec.substr(0, eq);
  if (!is_valid_type(type))
    throw std::invalid_argument("--capacity: \"" + type +
                                "\" is not a task type (1-128 bytes of A-Z a-z 0-9 . _ : -)");
  return {std::move(type), n};
}

tcp::endpoint server_app::start() {
  const tcp::endpoint at = parse_listen(options_.listen);
  if (options_.cluster) {
    std::string why;
    boost::system::error_code ec;
    // The shard count, given once (--shards or the URI's shards=N), and a
    // store the instances can share: open_store() checks the store's layout
    // against it when it opens it (bring_up()).
    const std::uint32_t shards = required_shards(
        options_.store.empty() ? default_store_uri() : options_.store,
        store_requirements{true, options_.shards_given ? options_.shards : 0}, ec, &why);
    if (ec == errc::invalid_cluster_options) throw std::invalid_argument(why);
    // A URI open_store() cannot read: it says what is wrong when it opens it.
    if (!ec) options_.shards = shards;
    ec = {};
    cluster_options{options_.shards, options_.lease, options_.instance}.validate(ec, &why);
    if (ec) throw std::invalid_argument("--cluster: " + why);
    // Named once here, so the leases and the pushes (X-Delayq-Instance)
    // carry the same name (default_instance_name() is HOSTNAME:PID).
    if (options_.instance.empty()) options_.instance = default_instance_name();
    if (!options_.advertise.empty()) {
      const auto url = parse_http_url(options_.advertise, why);
      // The parser speaks of push URLs, its first use.
      if (const auto at = why.find("the push URL"); at != std::string::npos)
        why.replace(at, 12, "the URL");
      if (!url) throw std::invalid_argument("--advertise: " + why);
      if (url->target != "/")
        throw std::invalid_argument("--advertise wants http://HOST:PORT without a path, got \"" +
                                    options_.advertise + "\"");
    }
    // Anyone who learns or guesses it can make a call look forwarded.
    if (!options_.cluster_secret.empty() && options_.cluster_secret.size() < 16)
      throw std::invalid_argument(
          "--cluster-secret has " + std::to_string(options_.cluster_secret.size()) +
          " bytes; give at least 16 (e.g. openssl rand -hex 32), the same on every instance");
    // The token keys the marker then: a short one can be guessed offline
    // from a marker a proxy logged with its call.
    if (options_.cluster_secret.empty() && !options_.token.empty() && options_.token.size() < 16)
      log(log_level::warning,
          "delayq-server: the forwarding marker is keyed with the --token, which has " +
              std::to_string(options_.token.size()) +
              " bytes: give --cluster-secret (16 bytes or more) or a longer token");
  }
  if (!at.address().is_loopback() && options_.token.empty())
    throw std::invalid_argument("refusing to listen on " + options_.listen +
                                " without a token: anyone who reaches it could add and delete "
                                "tasks. Give --token (or DELAYQ_TOKEN), or listen on loopback.");
  std::vector<ip_block> beanstalk_allow;
  for (const std::string& rule : options_.beanstalk_allow) {
    std::string why;
    auto b = ip_block::parse(rule, why);
    if (!b) throw std::invalid_argument("--beanstalk-allow \"" + rule + "\": " + why);
    beanstalk_allow.push_back(*b);
  }
  if (options_.max_job_size == 0 || options_.max_job_size > (std::size_t{1} << 30))
    throw std::invalid_argument("--max-job-size wants 1 to 1073741824 bytes");
  for (const std::string& spec : options_.beanstalk_listen) {
    if (spec.starts_with("unix:")) continue;
    // The same rule as HTTP's: beanstalk has no authentication, so a
    // reachable address needs the operator to have thought about it (a
    // token for the HTTP side, and --beanstalk-allow for the peers).
    const std::size_t colon = spec.rfind(':');
    std::string host = colon == std::string::npos ? spec : spec.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    boost::system::error_code ec;
    const auto addr = host == "localhost" ? boost::asio::ip::make_address("127.0.0.1")
                                          : boost::asio::ip::make_address(host, ec);
    if (!ec && !addr.is_loopback() && options_.token.empty())
      throw std::invalid_argument(
          "refusing to listen for beanstalk on " + spec +
          " without a token: beanstalk has no authentication, and anyone who reaches it could "
          "add and delete jobs. Listen on loopback or a unix: socket, or give --token and name "
          "the peers allowed with --beanstalk-allow CIDR.");
  }
  for (const std::string& spec : options_.push) {
    const std::size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--push wants TYPE=URL, got \"" + spec + "\"");
  }
  // Checked before anything starts: a bad or repeated --capacity is a usage
  // error (exit 2), not a limit silently ignored or silently first-wins.
  std::set<std::string> capped;
  for (const std::string& spec : options_.capacity) {
    std::string type = parse_capacity(spec).first;
    if (!capped.insert(type).second)
      throw std::invalid_argument("--capacity names type \"" + type + "\" twice");
  }
  auto& p = *p_;
  p.broker = std::make_unique<lease_broker>(io_.get_executor(),
                                            options_.cluster ? options_.instance : std::string{});

  if (options_.max_connections == 0)
    throw std::invalid_argument("--max-connections must be at least 1");
  p.guard = std::make_unique<request_guard>(
      guard_options{options_.token, at.address(), options_.allowed_hosts});
  http_limits limits;
  limits.max_connections = options_.max_connections;
  limits.max_body = options_.max_body;
  limits.watch_disconnect = &api_router::is_long_poll;
  // The token, the Host and the body's type, decided before a body is read
  // (even before the store is up).
  limits.check_header =
      [guard = p.guard.get()](const http_request_header& h) -> std::optional<http_answer> {
    if (auto refusal = guard->check(h)) return error_answer(*refusal);
    return std::nullopt;
  };
  // Until the store answered once, every request but the health check gets
  // 503: the server listens first, so a store that is late (or down) is
  // seen from outside, and comes up by itself once the store is there.
  p.http = std::make_unique<http_server>(
      io_,
      [&p](http_request&& req, http_respond respond, std::shared_ptr<http_gone_signal> gone) {
        if (p.ready.load(std::memory_order_acquire))
          return p.router->handle(std::move(req), std::move(respond), std::move(gone));
        const std::string_view target(req.target().data(), req.target().size());
        if (target == "/healthz") {
          http_answer h;
          h.status = 503;
          h.body = R"({"status":"store_unavailable"})";
          return respond(std::move(h));
        }
        http_answer a = error_answer(503, "store_unavailable",
                                     "the store cannot be reached yet; the server starts serving "
                                     "as soon as it can load its tasks");
        a.headers.emplace_back("Retry-After", "1");
        respond(std::move(a));
      },
      limits, [this] { return next_connection_home(); });
  tcp::endpoint bound;
  try {
    bound = p.http->listen(at);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("listening on " + options_.listen + ": " + e.code().message());
  }
  if (!options_.beanstalk_listen.empty()) {
    p.beanstalk = std::make_unique<beanstalk::listener>(
        io_.get_executor(), std::move(beanstalk_allow), options_.max_connections,
        options_.max_job_size,
        beanstalk::connection_limits{options_.beanstalk_command_timeout,
                                     options_.beanstalk_idle_timeout},
        [this] { return next_connection_home(); });
    for (const std::string& spec : options_.beanstalk_listen)
      beanstalk_addresses_.push_back(p.beanstalk->listen(spec));
  }
  if (options_.cluster && options_.advertise.empty()) {
    options_.advertise = advertised_url(bound);
    std::string why;
    if (!parse_http_url(options_.advertise, why))
      throw std::invalid_argument("--advertise: the default " + options_.advertise +
                                  " is not a URL the others can use (" + why +
                                  "); give --advertise http://HOST:PORT");
  }
  // Push targets: the policy knows the bound port (never push to ourselves).
  p.push_allow = std::make_shared<const push_policy>(options_.push_allow, bound);
  for (const std::string& spec : options_.push) {
    std::string why;
    bool unresolved = false;
    const auto url = parse_http_url(spec.substr(spec.find('=') + 1), why);
    if (url) why = p.push_allow->check(*url, &unresolved);
    // A name that does not resolve yet (its service starts after us) is
    // checked again at every push; an address the policy refuses is a
    // usage error.
    if (unresolved)
      log(log_level::warning, "--push " + spec + ": " + why + "; checked again at each push");
    else if (!why.empty())
      throw std::invalid_argument("--push " + spec + ": " + why);
  }
  push_client_options push_options;
  if (options_.cluster) {
    push_options.instance = options_.instance;
    push_options.shards = options_.shards;
  }
  push_options.policy = p.push_allow;
  // A push whose attempt lost its shard's lease while it waited (for a
  // slot, a connection, an I/O thread) is withdrawn unsent, not delivered
  // after the new owner's; read through `p`, since the engine is made later.
  push_options.attempt_current = [&p](const task& t) { return p.attempt_current(t); };
  p.pusher = std::make_unique<push_client>(io_.get_executor(), std::move(push_options));
  try {
    bring_up();
  } catch (const start_error& e) {
    if (!store_down(e.code())) throw;
    log(log_level::warning, std::string(e.what()) + "; listening anyway, retrying every second");
    p.starter = std::thread([this] {
      for (;;) {
        {
          std::unique_lock lock(p_->starter_mutex);
          if (p_->starter_cv.wait_for(lock, std::chrono::seconds{1},
                                      [this] { return p_->stopping; }))
            return;
        }
        try {
          bring_up();
          log(log_level::info, "the store answers: serving");
          return;
        } catch (const std::exception& e) {
          // Reported once a minute would be kinder to logs; a failing
          // start is rare enough to say every time.
          log(log_level::warning, std::string(e.what()) + "; retrying in a second");
        }
      }
    });
  }
  p.http->start();
  if (p.beanstalk) p.beanstalk->start();
  return bound;
}

void server_app::bring_up() {
  auto& p = *p_;
  const std::string uri = options_.store.empty() ? default_store_uri() : options_.store;
  const auto fail = [&](boost::system::error_code ec, const std::string& what) {
    p.jobs.reset();
    p.beanstalk_forward.reset();
    p.beanstalk_pool.reset();
    p.engine.reset();
    p.health.reset();
    p.forwarder.reset();
    p.marker.reset();
    p.peers.reset();
    p.registry.reset();
    p.settings_store.reset();
    throw start_error(ec, "store " + uri + ": " + what + ec.message());
  };
  // open_store() checks the store's layout against what this server needs
  // (a cluster store is checked, and an empty one given the sharded layout,
  // before it is opened) and says what to do when it does not fit.
  const store_requirements needs{options_.cluster, options_.cluster ? options_.shards : 0};
  const auto open = [&](boost::system::error_code& ec) {
    std::string why;
    auto store = open_store(uri, needs, ec, &why);
    if (ec == errc::shard_mismatch || ec == errc::invalid_cluster_options)
      throw start_error(ec, why);
    if (ec) log(log_level::error, "delayq: open_store: " + why);
    return store;
  };
  // The settings get a connection of their own, so a slow settings call
  // never waits behind the engine's writes (and the other way round).
  boost::system::error_code ec;
  p.settings_store = open(ec);
  if (ec) fail(ec, "");
  p.registry = std::make_unique<push_registry>(*p.settings_store);
  if (options_.cluster) p.peers = std::make_unique<peer_directory>(*p.settings_store);
  p.registry->load(ec);
  if (ec) fail(ec, "loading push targets: ");
  // The key of the forwarding marker: the secret, else the token (every
  // instance needs the same one anyway: it is forwarded with each call),
  // else one kept in the store, so that a cluster started with neither
  // still tells its members' markers from a client's.
  std::string stored_key;
  if (options_.cluster) {
    std::string key = options_.cluster_secret.empty() ? options_.token : options_.cluster_secret;
    if (key.empty()) {
      key = stored_key = forward_marker::load_or_create_key(*p.settings_store, {}, ec);
      if (ec) fail(ec, "reading or creating the cluster's forwarding key: ");
    }
    p.marker = std::make_unique<forward_marker>(std::move(key));
  }
  for (const std::string& spec : options_.push) {
    const std::size_t eq = spec.find('=');
    const std::string type = spec.substr(0, eq);
    push_target t;
    t.url = spec.substr(eq + 1);
    // Kept as stored when the URL is the same, so limits set through the
    // API survive a restart with the same command line.
    if (auto known = p.registry->find(type); known && known->url == t.url) continue;
    p.registry->put(type, t, ec);
    if (ec == boost::system::errc::invalid_argument || ec == errc::invalid_type)
      throw std::invalid_argument("--push " + spec + ": " + ec.message());
    if (ec) fail(ec, "saving --push " + spec + ": ");
  }

  // Every type goes to the fallback: pushed when it has a target, else
  // offered to consumers. Both end the attempt through its completion.
  // Both only hand the task on, so it starts where it comes due
  // (async_start::immediate): a task due when its write lands is in the
  // broker's ready order before its 201 or INSERTED is sent.
  executor_factory executors;
  executors.set_fallback_async(
      [&p](const task& t, attempt_completion done) {
        if (auto target = p.registry->find(t.type)) {
          p.pusher->deliver(t.type, *target, t,
                            [done](std::string failure) { done(std::move(failure)); });
        } else {
          p.broker->offer(t, std::move(done));
          // A target registered between the find() above and the offer (a PUT
          // here, or another instance's noticed) released the type's ready
          // tasks before this one arrived: give it back, so it is pushed.
          if (p.registry->has(t.type)) p.broker->release_ready(t.id);
        }
      },
      async_start::immediate);
  engine_options eo;
  eo.tick = options_.tick;
  eo.workers = options_.workers;
  eo.retry = options_.retry;
  eo.horizon = options_.horizon;
  // The I/O threads answer where they stand: a put's write is made on the
  // thread that read it when nothing else is in flight (engine_options) --
  // on a store on this machine only (SQLite, memory:). A store across the
  // network can stop answering for as long as its command timeout (a
  // partition), and a write waiting on an I/O thread would hold every
  // connection of that thread as long: the faults harness saw a reserve's
  // answer leave 5 s late, after its lease had expired and another worker
  // had finished the task. There the writer thread writes.
  eo.caller_writes = uri.starts_with("sqlite:") || uri.starts_with("memory:");
  if (options_.cluster) {
    eo.cluster = cluster_options{options_.shards, options_.lease, options_.instance};
    // Push targets are cluster-wide: a PUT or DELETE on any instance reaches
    // the others through the store's setting notice. A type that just gained
    // a target has its tasks waiting for consumers pushed, as the PUT does
    // on the instance that took it. Runs on an engine thread, one call at a
    // time; the engine stops (and joins it) before the registry and broker go.
    // A hand-over waits for the attempts on the shard: tasks waiting here
    // for a consumer or a connection, which nobody works on yet, are given
    // back at once when their shard is lost or leaving (the next owner runs
    // them), so they cannot hold it up. On the engine's lease thread.
    eo.on_attempts_stale = [&p] {
      const delayq::engine* e = p.engine.get();
      if (e == nullptr) return;
      p.broker->release_stale();
      p.pusher->release_queued([e](const task& t) { return !e->attempt_current(t); });
    };
    eo.on_settings_changed = [&p, failing = false, stored_key]() mutable {
      boost::system::error_code load_ec;
      const std::vector<std::string> gained = p.registry->load(load_ec);
      if (load_ec) {
        // The engine calls again within a second: one line per outage.
        if (!failing)
          log(log_level::warning,
              "delayq-server: rereading the push targets failed: " + load_ec.message() +
                  "; the ones known stay in use, trying again every second");
        failing = true;
        return false;
      }
      if (failing) log(log_level::info, "delayq-server: push targets reread");
      failing = false;
      for (const std::string& type : gained) p.broker->release_type(type);
      // A key kept in the store: another instance's, when two started at
      // once and both saved one (the last saved is everyone's), or ours
      // saved again if the store lost it. Best effort, as below.
      if (!stored_key.empty()) {
        std::string key =
            forward_marker::load_or_create_key(*p.settings_store, stored_key, load_ec);
        if (!load_ec && key != stored_key) {
          p.marker->set_key(key);
          stored_key = std::move(key);
        }
      }
      // An instance that came back on another address: a forward would
      // otherwise find the new one only after failing to reach the old.
      // And ours, if the store lost it. Best effort: peer_directory::url_of()
      // reads again on a miss, and this runs again at least every minute.
      p.peers->load(load_ec);
      if (!load_ec) p.peers->keep_announced(load_ec);
      return true;
    };
  }
  for (const std::string& spec : options_.capacity) eo.type_capacity.insert(parse_capacity(spec));
  auto store = open(ec);
  if (ec) fail(ec, "");
  if (options_.cluster) {
    // Before the engine starts, so that a failure here has started nothing.
    // Nobody forwards here before this instance is a member (its first
    // lease round, in start()), and until start() returns the calls that
    // are forwarded get 503 like any other.
    p.peers->announce(options_.instance, options_.advertise, ec);
    if (ec) fail(ec, "announcing this instance's address (" + options_.advertise + "): ");
    p.forwarder =
        std::make_unique<peer_forwarder>(io_.get_executor(), options_.instance, *p.marker);
  }
  // The store's answers come back on the engine's io_context, where the
  // requests that wait for them run too: a write crosses no thread of the
  // store's (PostgreSQL and Redis; SQLite ignores it). A lone connection is
  // placed on that thread (next_connection_home()).
  store->drive_writes_on(io_.get_executor());
  p.engine = std::make_unique<delayq::engine>(io_, std::move(executors), std::move(store), eo);
  // A consumer's wait that ends the instant a task comes due gets the task.
  p.broker->set_before_timeout([engine = p.engine.get()] { engine->fire_due(); });
  // A ready task waits in the broker until a consumer comes, maybe after
  // this instance stalled or was cut off and its shard moved on: such an
  // attempt is given back, not handed out (the shard's owner runs it).
  p.broker->set_attempt_check([&p](const task& t) { return p.attempt_current(t); });
  p.engine->start(ec);
  if (ec) fail(ec, "starting the engine: ");

  api_parts ap;
  ap.engine = p.engine.get();
  if (p.beanstalk) {
    ap.extra_metrics = [b = p.beanstalk.get()](std::string& out) {
      b->registry().render_metrics(out);
    };
  }
  ap.broker = p.broker.get();
  ap.registry = p.registry.get();
  ap.pusher = p.pusher.get();
  ap.push_allow = p.push_allow.get();
  ap.http = p.http.get();
  ap.io_threads = options_.io_threads;
  ap.guard = p.guard.get();
  ap.peers = p.peers.get();
  ap.forwarder = p.forwarder.get();
  ap.forwarding.timeout = options_.forward_timeout;
  // One probe a second on the settings connection, whoever asks /healthz
  // and how often.
  p.health = std::make_unique<store_health>([store = p.settings_store.get()](std::string& why) {
    boost::system::error_code probe;
    // A store without settings is as unhealthy as before the roles were
    // split: errc::unsupported.
    if (auto* settings = delayq::settings_of(*store, probe)) settings->load_settings(probe);
    if (probe) why = probe.message();
    return !probe;
  });
  p.health->start();
  ap.health = p.health.get();
  p.router = std::make_unique<api_router>(std::move(ap), 8);
  if (p.beanstalk) {
    beanstalk::job_service::parts jp;
    jp.engine = p.engine.get();
    jp.broker = p.broker.get();
    jp.sequences = p.settings_store.get();
    jp.pushed = [registry = p.registry.get()](const std::string& type) {
      return registry->has(type);
    };
    jp.max_job_size = options_.max_job_size;
    jp.instance = options_.instance.empty() ? default_instance_name() : options_.instance;
    jp.draining = &refuse_puts_;
    if (options_.cluster) {
      p.beanstalk_pool = std::make_unique<boost::asio::thread_pool>(2);
      forward_limits limits;
      limits.timeout = options_.forward_timeout;
      p.beanstalk_forward =
          std::make_unique<call_forwarder>(*p.peers, *p.forwarder, *p.beanstalk_pool, limits);
      jp.owns = [engine = p.engine.get(), self = options_.instance](const std::string& id) {
        return engine->owner_of(id) == self;
      };
      jp.forward = [&p, token = options_.token](const std::string& id, std::string method,
                                                std::string target, std::string body,
                                                std::function<void(unsigned, std::string)> done) {
        namespace bhttp = boost::beast::http;
        http_request req;
        req.method(bhttp::string_to_verb(method));
        req.target(target);
        req.version(11);
        if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
        if (!body.empty()) req.set(bhttp::field::content_type, "application/json");
        req.body() = std::move(body);
        req.prepare_payload();
        p.beanstalk_forward->forward(
            p.engine->owner_of(id), std::move(req), id,
            [done = std::move(done)](http_answer a) { done(a.status, std::move(a.body)); },
            nullptr);
      };
    }
    // Store calls (deletes, kicks, peeks, stats) and the short waits of
    // reserve-job and after_arrivals() share these threads.
    p.jobs = std::make_unique<beanstalk::job_service>(std::move(jp), 8);
    p.beanstalk->set_service(p.jobs.get());
  }
  p.ready.store(true, std::memory_order_release);
}

void server_app::refuse_beanstalk_puts() { refuse_puts_.store(true); }

void server_app::run() {
  std::vector<std::thread> threads;
  for (auto& io : more_io_)
    threads.emplace_back([io = io.get()] {
      // Kept running while no connection is open on it, until stop_io().
      auto work = boost::asio::make_work_guard(*io);
      io->run();
    });
  io_.run();
  for (auto& io : more_io_) io->stop();
  for (std::thread& t : threads) t.join();
}

void server_app::drain(std::chrono::milliseconds grace) {
  auto& p = *p_;
  // One deadline for the whole drain: the requests in flight, then the
  // pushes in flight.
  const auto until = std::chrono::steady_clock::now() + grace;
  const auto left = [&until] {
    return std::max(std::chrono::milliseconds{0},
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        until - std::chrono::steady_clock::now()));
  };
  stop_starter();
  if (!p.http) {
    stop_io();
    return;
  }
  p.http->drain();
  if (p.beanstalk) p.beanstalk->stop_accepting();
  if (!p.ready.load(std::memory_order_acquire)) {
    // Never served: nothing to give back, no engine to stop.
    p.http->close_all();
    stop_io();
    return;
  }
  // Long polls would hold the drain for up to a minute: answer them now.
  p.broker->stop_waiting();
  while (p.http->in_flight() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  // The engine stops firing first (stop() begins by refusing calls), so the
  // tasks given back below stay in the store instead of being fired again
  // every tick; stop() then waits, until the deadline, for the attempts left
  // (the pushes in flight), and returns once their outcomes are written.
  auto stopped =
      std::async(std::launch::async, [&p, wait = left()] { return p.engine->stop(wait); });
  for (;;) {
    boost::system::error_code ec;
    p.engine->cancel("drain-probe", ec);
    if (ec == errc::not_running || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  // What was not finished goes back to the store's keeping: delivered again
  // after the restart.
  p.broker->close();
  // No push starts any more (those waiting for a slot of their type are
  // given back too), and those in flight run on: a 2xx before the deadline
  // ends the attempt as a success, so the task leaves the store instead of
  // being pushed again after the restart.
  p.pusher->drain();
  const auto pushes = [](std::size_t n) {
    return std::to_string(n) + (n == 1 ? " push" : " pushes");
  };
  if (const std::size_t n = p.pusher->in_flight(); n > 0)
    log(log_level::warning, "drain: " + pushes(n) + " in flight; waiting up to " +
                                std::to_string(left().count()) + " ms for " +
                                (n == 1 ? "its answer" : "their answers"));
  const bool drained = stopped.get();
  // Past the deadline a push is abandoned: its attempt does not count, and
  // the task, still stored, is pushed again after the restart.
  if (const std::size_t n = p.pusher->in_flight(); n > 0)
    log(log_level::warning, "drain: " + pushes(n) +
                                " unanswered at the deadline: abandoned, pushed again after the "
                                "restart (at-least-once)");
  p.pusher->stop();
  if (!drained) log(log_level::warning, "drain: attempts still running at exit");
  p.router->join();
  if (p.peers) {
    // Calls on our shards go to their new owners now: nothing to send here.
    boost::system::error_code ec;
    p.peers->withdraw(ec);
    if (ec) log(log_level::warning, "drain: erasing this instance's address: " + ec.message());
  }
  // The store completes its writes on io_ (drive_writes_on()): the engine's
  // last ones land before io_ stops.
  p.engine->close();
  p.http->close_all();
  stop_io();
}

}  // namespace delayq::server
