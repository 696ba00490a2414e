// persistence/redis/shard_leases_redis.cpp - the shard lease table in Redis
// (delayq/redis_shard_leases.hpp; the scripts are in lease_scripts.hpp).
//
// A round is one or two pipelined round trips, whatever the shard count:
//   1. renew every lease held, then heartbeat (the members script, which
//      also answers the live members and when each one's heartbeat lapses);
//   2. only when something changes hands: release the leases another live
//      member should own, acquire the free or expired ones this instance
//      should own, then heartbeat again.
// The heartbeat comes after the lease writes of its trip, so a member entry
// never expires before the leases its last round wrote: when the others see
// an instance gone, its leases have lapsed too and they can take them at
// once. And they see it gone as soon as its entry lapses: a round that finds
// another member's heartbeat lapsing before the next round is due asks for
// one just after it (finish()). Together these keep failover within a lease
// and one round after the lost member's last round.
//
// On a Redis Cluster each shard's lease key has a hash tag of its own
// ({PREFIX:s}), so the leases spread over the nodes: a trip is one pipeline
// per node, sent node after node, the one holding the members key last (the
// heartbeat still follows the lease writes). A redirect re-runs that node's
// pipeline where the slot of its first call now lives (cluster_router.hpp;
// every lease script may run twice: renew, release and the heartbeat are
// idempotent, and an acquire by the same incarnation keeps its token). When
// the calls of one pipeline end up on several nodes mid-reshard, the round
// fails and the next one, grouped by the refreshed slot map, sorts it out.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include "cluster_router.hpp"
#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "lease_scripts.hpp"
#include "store_handshake.hpp"

namespace delayq {
namespace detail::redis {
namespace {

using clock = std::chrono::steady_clock;

// 128 random bits, in hex.
std::string new_incarnation() {
  std::random_device rd;
  char out[33];
  for (int i = 0; i < 4; ++i) std::snprintf(out + 8 * i, 9, "%08x", static_cast<unsigned>(rd()));
  return std::string(out, 32);
}

// One script call: its keys and arguments are owned here, since a command
// only references the bytes.
struct call {
  lease_script script;
  std::string key;
  std::vector<std::string> args;
};

class redis_shard_leases final : public shard_leases {
 public:
  redis_shard_leases(const redis_options& redis, cluster_options cluster)
      : redis_(redis),
        cluster_(std::move(cluster)),
        name_(redis_.describe() + " leases of " + cluster_.instance),
        members_key_(redis_members_key(redis_.prefix)),
        lease_ms_(std::to_string(cluster_.lease.count())),
        incarnation_(new_incarnation()),
        router_(redis_, name_, client_name_for(redis_, ":leases"),
                store_handshake::reader(redis_)) {
    lease_keys_.reserve(cluster_.shards);
    for (std::uint32_t s = 0; s < cluster_.shards; ++s)
      lease_keys_.push_back(redis_lease_key(redis_.prefix, s));
  }

  lease_round renew(std::span<const std::uint32_t> keep, boost::system::error_code& ec) override;
  void release_all(std::span<const std::uint32_t> keep, boost::system::error_code& ec) override;
  const cluster_options& options() const noexcept override { return cluster_; }

 private:
  // One trip: every call, grouped into one pipeline per node. Replies by
  // call; on failure `ec` is set (logged) and the replies are incomplete.
  std::vector<reply_ptr> run_trip(const std::vector<call>& calls, const char* what,
                                  boost::system::error_code& ec);
  std::vector<reply_ptr> run_calls(connection& c, const std::vector<const call*>& calls);
  void load_scripts(connection& c);
  void set_members(std::vector<std::string> members);
  lease_round finish(clock::time_point start, const std::map<std::uint32_t, shard_lease>& before,
                     bool failed);
  // set_members() and first_lapse_ from a trip's last reply (the
  // heartbeat's); a malformed one sets `ec`, logged.
  void read_members(const std::vector<reply_ptr>& replies, boost::system::error_code& ec);

  // redis_ is declared before router_, which keeps a reference to it.
  redis_options redis_;
  cluster_options cluster_;
  std::string name_;
  std::string members_key_;
  std::string lease_ms_;
  // This object's own id beside the instance name: two processes under one
  // name (a restart while the old one is stalled, a duplicate) never hold a
  // lease at once (lease_scripts.cpp).
  std::string incarnation_;
  std::vector<std::string> lease_keys_;

  std::mutex mutex_;  // guards everything below
  cluster_router router_;
  std::vector<std::string> shas_;  // by lease_script, once SCRIPT LOAD answered (any node)
  std::map<std::uint32_t, shard_lease> held_;
  std::vector<std::string> members_;  // sorted, as of the last round
  std::vector<bool> mine_;            // by shard: this instance is the desired owner
  // When the first other member's heartbeat lapses, on our steady clock (no
  // value: no other member), as of the last members reply.
  std::optional<clock::time_point> first_lapse_;
};

// SCRIPT LOAD answers the SHA1 of a script, which depends on its text only:
// asked once per object, it holds across reconnects and server restarts.
void redis_shard_leases::load_scripts(connection& c) {
  if (!shas_.empty()) return;
  std::vector<command> cmds(lease_script_count);
  for (int i = 0; i < lease_script_count; ++i)
    cmds[i].arg("SCRIPT").arg("LOAD").arg(lease_script_text(static_cast<lease_script>(i)));
  auto replies = c.exchange(cmds);
  std::vector<std::string> shas;
  for (const auto& r : replies) {
    if (r->type != REDIS_REPLY_STRING) throw_server_error("loading the lease scripts", r.get());
    shas.push_back(reply_text(r.get()));
  }
  shas_ = std::move(shas);
}

// Sends every call as EVALSHA in one pipeline; from the first call the
// server answers NOSCRIPT (it restarted, or SCRIPT FLUSH) on, they go again
// as EVAL.
// Any other error reply fails the whole round. Runs inside router_.run().
// Another node of a cluster answers NOSCRIPT the first time: its EVAL
// caches the script there.
std::vector<reply_ptr> redis_shard_leases::run_calls(connection& conn,
                                                     const std::vector<const call*>& calls) {
  load_scripts(conn);
  auto build = [&](const call& c, bool eval) {
    command cmd;
    const auto i = static_cast<std::size_t>(c.script);
    // string_view on both sides: a ternary of char* and std::string would
    // make a temporary the command would point into.
    const std::string_view body =
        eval ? std::string_view(lease_script_text(c.script)) : std::string_view(shas_[i]);
    cmd.arg(eval ? "EVAL" : "EVALSHA").arg(body);
    cmd.arg("1").arg(c.key);
    for (const std::string& a : c.args) cmd.arg(a);
    return cmd;
  };
  std::vector<command> cmds;
  cmds.reserve(calls.size());
  for (const call* c : calls) cmds.push_back(build(*c, false));
  std::vector<reply_ptr> replies = conn.exchange(cmds, true);
  // Everything from the first NOSCRIPT on goes again, in order, as EVAL
  // (the calls after it ran before it: the heartbeat must not precede the
  // lease writes of its trip). Every lease script may run twice: renew,
  // release, members and leave are idempotent, and acquire by the same
  // incarnation keeps the token.
  std::size_t first = replies.size();
  for (std::size_t i = 0; i < replies.size(); ++i)
    if (is_noscript(replies[i].get())) {
      first = i;
      break;
    }
  if (first < replies.size()) {
    std::vector<command> evals;
    for (std::size_t i = first; i < calls.size(); ++i) evals.push_back(build(*calls[i], true));
    auto second = conn.exchange(evals, true);
    for (std::size_t k = 0; k < second.size(); ++k) replies[first + k] = std::move(second[k]);
  }
  for (const auto& r : replies)
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("lease script", r.get());
  return replies;
}

std::vector<reply_ptr> redis_shard_leases::run_trip(const std::vector<call>& calls,
                                                    const char* what,
                                                    boost::system::error_code& ec) {
  ec = {};
  std::vector<reply_ptr> replies(calls.size());
  // Group by the node that serves each key's slot (one group without a
  // cluster), in call order; the group of the last call (the heartbeat) runs
  // last.
  std::vector<std::pair<connection*, std::vector<std::size_t>>> groups;
  std::vector<unsigned> slots(calls.size());
  try {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      slots[i] = router_.cluster() ? key_slot(calls[i].key) : 0;
      connection* node = &router_.owner(slots[i]);
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& e) { return e.first == node; });
      if (g == groups.end()) g = groups.insert(groups.end(), {node, {}});
      g->second.push_back(i);
    }
  } catch (const redis_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::warning, name_ + ": " + what + ": " + f.message);
    return replies;
  }
  if (!calls.empty()) {
    const auto last = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.second.back() == calls.size() - 1;
    });
    std::rotate(last, last + 1, groups.end());
  }
  for (const auto& [node, indices] : groups) {
    std::vector<const call*> group;
    for (const std::size_t i : indices) group.push_back(&calls[i]);
    router_.run(slots[indices.front()], what, ec, [&](connection& c) {
      auto got = run_calls(c, group);
      for (std::size_t k = 0; k < indices.size(); ++k) replies[indices[k]] = std::move(got[k]);
    });
    if (ec) return replies;
  }
  return replies;
}

// A number of ms as the members script writes it (the server's clock, or a
// score); false when it is none.
bool parse_ms(const redisReply* r, std::int64_t& out) {
  if (r->type != REDIS_REPLY_STRING) return false;
  const std::string text = reply_text(r);
  // A score comes back in the server's double notation: whole ms here, but
  // read it as a double so that an exponent form still parses.
  double v = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (err != std::errc{} || end != text.data() + text.size()) return false;
  out = static_cast<std::int64_t>(v);
  return true;
}

void redis_shard_leases::read_members(const std::vector<reply_ptr>& replies,
                                      boost::system::error_code& ec) {
  // After the reply came back, so later than the script ran: a lapse reckoned
  // from here is no earlier on our clock than it is on the server's.
  const auto read_at = clock::now();
  try {
    // {now, {name, expiry, name, expiry, ...}} (lease_scripts.hpp).
    const redisReply* r = replies.back().get();
    std::int64_t now = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !parse_ms(r->element[0], now) ||
        r->element[1]->type != REDIS_REPLY_ARRAY || r->element[1]->elements % 2 != 0)
      throw redis_failure{errc::store_error, "members script: unexpected reply"};
    const redisReply* list = r->element[1];
    std::vector<std::string> names;
    std::optional<std::int64_t> first;
    for (std::size_t i = 0; i < list->elements; i += 2) {
      std::int64_t expiry = 0;
      if (!parse_ms(list->element[i + 1], expiry))
        throw redis_failure{errc::store_error, "members script: unexpected expiry"};
      names.push_back(reply_text(list->element[i]));
      if (names.back() != cluster_.instance) first = std::min(expiry, first.value_or(expiry));
    }
    std::sort(names.begin(), names.end());
    set_members(std::move(names));
    first_lapse_.reset();
    if (first)
      first_lapse_ = read_at + std::chrono::milliseconds{std::max<std::int64_t>(*first - now, 0)};
  } catch (const redis_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::warning, name_ + ": lease round: " + f.message);
  }
}

// Recomputes which shards this instance should own, when the live members
// changed: rendezvous hashing costs shards x members hashes.
void redis_shard_leases::set_members(std::vector<std::string> members) {
  if (members == members_ && !mine_.empty()) return;
  members_ = std::move(members);
  mine_.assign(cluster_.shards, false);
  for (std::uint32_t s = 0; s < cluster_.shards; ++s) {
    const std::size_t owner = rendezvous_owner(s, members_);
    mine_[s] = owner < members_.size() && members_[owner] == cluster_.instance;
  }
}

lease_round redis_shard_leases::finish(clock::time_point start,
                                       const std::map<std::uint32_t, shard_lease>& before,
                                       bool failed) {
  const auto now = clock::now();
  if (failed) {
    // Without an answer we only know how long our leases surely last.
    std::erase_if(held_, [&](const auto& h) { return h.second.valid_until <= now; });
  }
  lease_round out;
  // A shard lost and taken again within the round has a new token: it is
  // reported both lost and gained, since what was done under the old token
  // is fenced now.
  for (const auto& [s, l] : held_) {
    out.held.push_back(l);
    const auto was = before.find(s);
    if (was == before.end() || was->second.token != l.token) out.gained.push_back(s);
  }
  for (const auto& [s, l] : before) {
    const auto now_held = held_.find(s);
    if (now_held == held_.end() || now_held->second.token != l.token) out.lost.push_back(s);
  }
  if (!failed) {
    out.members = members_;
    // After trip 2 what is held and not ours to own was kept (renew's keep).
    for (const auto& [s, l] : held_)
      if (!mine_.empty() && !mine_[s]) out.leaving.push_back(s);
  }
  const auto round = cluster_.lease / 3;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
  out.next_round_in = std::max(std::chrono::milliseconds{0}, round - spent);
  if (!failed && first_lapse_) {
    // A member whose heartbeat lapses before our next round (it stalled, died
    // or was cut off: a live one heartbeats every round, two thirds of a
    // lease before its entry would lapse) gets a round of ours just after:
    // that round finds it gone and takes the shards it should now own, its
    // leases having lapsed no later than its entry. Without it the takeover
    // waited up to one more round (lease/3). The margin covers the ms the
    // server rounds its clock to.
    constexpr auto margin = std::chrono::milliseconds{2};
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(*first_lapse_ - now) + margin;
    if (until < out.next_round_in)
      out.next_round_in = std::max(until, std::chrono::milliseconds{1});
  }
  return out;
}

lease_round redis_shard_leases::renew(std::span<const std::uint32_t> keep,
                                      boost::system::error_code& ec) {
  std::lock_guard lock(mutex_);
  const auto before = held_;

  // Trip 1: renew what we hold, then heartbeat and read the members.
  std::vector<call> calls;
  std::vector<std::uint32_t> renewed;
  for (const auto& [s, l] : held_) {
    calls.push_back({lease_script::renew,
                     lease_keys_[s],
                     {cluster_.instance, std::to_string(l.token), lease_ms_, incarnation_}});
    renewed.push_back(s);
  }
  calls.push_back({lease_script::members, members_key_, {cluster_.instance, lease_ms_}});
  // Sent no earlier than this: the server's expiry is at least start + lease.
  const auto start = clock::now();
  std::vector<reply_ptr> replies = run_trip(calls, "lease round", ec);
  if (!ec) read_members(replies, ec);
  if (ec) return finish(start, before, true);
  std::string refused;
  for (std::size_t i = 0; i < renewed.size(); ++i) {
    const redisReply* r = replies[i].get();
    shard_lease& l = held_[renewed[i]];
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
      l.valid_until = start + cluster_.lease;
    } else {
      refused += (refused.empty() ? "" : " ") + std::to_string(l.shard);
      held_.erase(renewed[i]);
    }
  }
  if (!refused.empty())
    log(log_level::warning,
        name_ + ": lost the leases of shards " + refused +
            ": they lapsed and another instance took them, or another process runs under the "
            "instance name '" +
            cluster_.instance + "'");

  // Trip 2: give away what another live member should own, take what we
  // should own. The leases given away count as gone from here on, answered
  // or not: we were leaving them anyway.
  calls.clear();
  std::vector<std::uint32_t> acquiring;
  for (auto it = held_.begin(); it != held_.end();) {
    if (mine_[it->first] || std::binary_search(keep.begin(), keep.end(), it->first)) {
      ++it;  // ours, or the caller is not done with it (lease_round::leaving)
      continue;
    }
    calls.push_back({lease_script::release,
                     lease_keys_[it->first],
                     {cluster_.instance, std::to_string(it->second.token), incarnation_}});
    it = held_.erase(it);
  }
  const std::size_t releases = calls.size();
  for (std::uint32_t s = 0; s < cluster_.shards; ++s) {
    if (!mine_[s] || held_.contains(s)) continue;
    calls.push_back(
        {lease_script::acquire, lease_keys_[s], {cluster_.instance, lease_ms_, incarnation_}});
    acquiring.push_back(s);
  }
  if (calls.empty()) return finish(start, before, false);
  calls.push_back({lease_script::members, members_key_, {cluster_.instance, lease_ms_}});
  const auto start2 = clock::now();
  replies = run_trip(calls, "lease round", ec);
  // The live set may have changed since trip 1; the next round acts on it.
  if (!ec) read_members(replies, ec);
  if (ec) return finish(start, before, true);
  for (std::size_t i = 0; i < acquiring.size(); ++i) {
    const redisReply* r = replies[releases + i].get();
    if (r->type != REDIS_REPLY_INTEGER || r->integer <= 0) continue;
    held_[acquiring[i]] =
        shard_lease{acquiring[i], static_cast<std::uint64_t>(r->integer), start2 + cluster_.lease};
  }
  return finish(start, before, false);
}

void redis_shard_leases::release_all(std::span<const std::uint32_t> keep,
                                     boost::system::error_code& ec) {
  std::lock_guard lock(mutex_);
  std::vector<call> calls;
  for (const auto& [s, l] : held_)
    if (!std::binary_search(keep.begin(), keep.end(), s))
      calls.push_back({lease_script::release,
                       lease_keys_[s],
                       {cluster_.instance, std::to_string(l.token), incarnation_}});
  calls.push_back({lease_script::leave, members_key_, {cluster_.instance}});
  held_.clear();
  members_.clear();
  mine_.clear();
  first_lapse_.reset();
  run_trip(calls, "leaving the cluster", ec);
}

}  // namespace
}  // namespace detail::redis

std::string redis_lease_key(std::string_view prefix, std::uint32_t shard) {
  return "{" + std::string(prefix) + ":" + std::to_string(shard) + "}:lease";
}

std::string redis_members_key(std::string_view prefix) {
  return "{" + std::string(prefix) + "}:members";
}

std::unique_ptr<shard_leases> make_redis_shard_leases(const redis_options& redis,
                                                      cluster_options cluster,
                                                      boost::system::error_code& ec,
                                                      std::string* message) {
  cluster.validate(ec, message);
  if (ec) return nullptr;
  if (cluster.instance.empty()) cluster.instance = default_instance_name();
  ec = {};
  return std::make_unique<detail::redis::redis_shard_leases>(redis, std::move(cluster));
}

std::unique_ptr<shard_leases> make_redis_shard_leases(const redis_options& redis,
                                                      cluster_options cluster) {
  boost::system::error_code ec;
  std::string why;
  auto leases = make_redis_shard_leases(redis, std::move(cluster), ec, &why);
  if (ec) throw boost::system::system_error(ec, why);
  return leases;
}

}  // namespace delayq
