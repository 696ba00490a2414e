// persistence/redis/cluster_router.cpp - the slot map of Redis Cluster and
// the routing by slot (see cluster_router.hpp).
#include "cluster_router.hpp"

#include <algorithm>
#include <thread>

#include "delayq/log.hpp"

namespace delayq::detail::redis {
namespace {

std::string address_of(const std::string& host, unsigned port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

std::vector<slot_range> parse_cluster_slots(const redisReply* r, const std::string& asked_host) {
  const auto bad = [](const std::string& why) {
    return redis_failure{errc::store_error, "unexpected CLUSTER SLOTS reply: " + why};
  };
  if (!r || r->type == REDIS_REPLY_ERROR) throw server_error("CLUSTER SLOTS", r);
  if (r->type != REDIS_REPLY_ARRAY) throw bad("not an array");
  std::vector<slot_range> out;
  out.reserve(r->elements);
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
      throw bad("entry " + std::to_string(i) + " is not [first, last, master, ...]");
    const long long first = e->element[0]->integer, last = e->element[1]->integer;
    if (first < 0 || last < first || last >= static_cast<long long>(cluster_slots))
      throw bad("slot range " + std::to_string(first) + "-" + std::to_string(last));
    const redisReply* m = e->element[2];
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER ||
        m->element[1]->integer <= 0 || m->element[1]->integer > 65535)
      throw bad("the master of entry " + std::to_string(i) + " is not [host, port, ...]");
    slot_range range;
    range.first = static_cast<unsigned>(first);
    range.last = static_cast<unsigned>(last);
    range.host = reply_text(m->element[0]);
    // An empty host (or "?", unknown endpoint) means the node that answered.
    if (range.host.empty() || range.host == "?") range.host = asked_host;
    range.port = static_cast<unsigned>(m->element[1]->integer);
    out.push_back(std::move(range));
  }
  return out;
}

cluster_router::cluster_router(const redis_connection_options& opts, std::string store_name,
                               std::string client_name,
                               std::shared_ptr<const handshake_extension> handshake)
    : opts_(opts),
      name_(std::move(store_name)),
      client_name_(std::move(client_name)),
      handshake_(std::move(handshake)) {
  // 128 KiB of map only in a cluster; list() makes a router per call.
  if (opts_.cluster)
    slots_.assign(cluster_slots, nullptr);
  else
    single_ = std::make_unique<connection>(opts_, name_, client_name_, handshake_);
}

cluster_router::~cluster_router() = default;

cluster_router::node_entry& cluster_router::entry(const std::string& host, unsigned port) {
  auto& slot = nodes_[address_of(host, port)];
  if (!slot) {
    slot = std::make_unique<node_entry>();
    slot->opts = opts_;
    slot->opts.host = host;
    slot->opts.port = port;
    slot->opts.seeds.clear();  // address() now names this node
    slot->conn = std::make_unique<connection>(slot->opts, name_, client_name_, handshake_);
  }
  return *slot;
}

connection& cluster_router::node(const std::string& host, unsigned port) {
  if (!opts_.cluster) return *single_;
  return *entry(host, port).conn;
}

connection& cluster_router::owner(unsigned slot) {
  if (!opts_.cluster) return *single_;
  if (!slots_[slot]) refresh();
  if (!slots_[slot])
    throw redis_failure{errc::store_unavailable,
                        "no node of the cluster serves hash slot " + std::to_string(slot)};
  return *slots_[slot]->conn;
}

std::optional<std::vector<slot_range>> cluster_router::ask_slots(
    const redis_connection_options& where, std::string& why) const {
  // A connection of its own: a node's connection may be in the middle of a
  // pipeline when the map must be read.
  connection c(where, name_, client_name_ + ":slots");
  try {
    c.ensure_connected();
    auto replies = c.exchange({command().arg("CLUSTER").arg("SLOTS")});
    return parse_cluster_slots(replies[0].get(), where.host);
  } catch (const redis_failure& f) {
    why = f.message;
  } catch (const cluster_redirect& r) {
    why = r.text;
  } catch (const append_failed&) {
    why = "out of memory while buffering commands";
  }
  return std::nullopt;
}

void cluster_router::refresh() {
  if (!opts_.cluster) return;
  std::vector<const redis_connection_options*> candidates;
  for (const auto& [address, n] : nodes_) candidates.push_back(&n->opts);
  std::vector<redis_connection_options> seeds;
  for (const auto& [host, port] : opts_.seeds) {
    redis_connection_options o = opts_;
    o.host = host;
    o.port = port;
    o.seeds.clear();
    seeds.push_back(std::move(o));
  }
  for (const redis_connection_options& o : seeds) candidates.push_back(&o);
  std::string why = "no node known";
  for (const redis_connection_options* where : candidates) {
    auto ranges = ask_slots(*where, why);
    if (!ranges) continue;
    std::fill(slots_.begin(), slots_.end(), nullptr);
    for (const slot_range& r : *ranges) {
      node_entry& e = entry(r.host, r.port);
      for (unsigned s = r.first; s <= r.last; ++s) slots_[s] = &e;
    }
    return;
  }
  throw redis_failure{errc::store_unavailable,
                      "no node of the cluster answered CLUSTER SLOTS (last: " + why + ")"};
}

void cluster_router::moved(unsigned slot, const std::string& host, unsigned port) noexcept {
  try {
    slots_[slot % cluster_slots] = &entry(host, port);
    refresh();
  } catch (...) {
    // The map keeps the owner the MOVED named; a later call refreshes.
  }
}

std::string cluster_router::owner_address(unsigned slot) {
  if (!opts_.cluster) return opts_.address();
  refresh();
  return slots_[slot] ? slots_[slot]->opts.address() : std::string();
}

void cluster_router::pause_for(std::chrono::milliseconds ms) { std::this_thread::sleep_for(ms); }

// Info, not warning: redirects are normal while slots move.
void cluster_router::log_redirect(const std::string& text) const {
  log(log_level::info, name_ + ": cluster redirect '" + text + "'; following it");
}

void cluster_router::log_failed(const char* what, const std::string& why) const {
  log(log_level::error, name_ + ": " + what + " failed: " + why);
}

}  // namespace delayq::detail::redis
