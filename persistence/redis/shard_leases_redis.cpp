// persistence/redis/shard_leases_redis.cpp - the shard lease table in Redis
// (delayq/redis_shard_leases.hpp; the scripts are in lease_scripts.hpp).
//
// A round is one or two pipelined round trips, whatever the shard count:
//   1. renew every lease held, then heartbeat (the members script, which
//      also answers the live members);
//   2. only when something changes hands: release the leases another live
//      member should own, acquire the free or expired ones this instance
//      should own, then heartbeat again.
// The heartbeat comes after the lease writes of its trip, so a member entry
// never expires before the leases its last round wrote: when the others see
// an instance gone, its leases have lapsed too and they can take them at
// once (this is what keeps failover within lease + lease/3 + one round).
#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "lease_scripts.hpp"

namespace delayq {
namespace detail::redis {
namespace {

using clock = std::chrono::steady_clock;

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
        conn_(redis_, name_, ":leases", false) {
    lease_keys_.reserve(cluster_.shards);
    for (std::uint32_t s = 0; s < cluster_.shards; ++s)
      lease_keys_.push_back(redis_lease_key(redis_.prefix, s));
  }

  lease_round renew(boost::system::error_code& ec) override;
  void release_all(boost::system::error_code& ec) override;
  const cluster_options& options() const noexcept override { return cluster_; }

 private:
  std::vector<reply_ptr> run_calls(const std::vector<call>& calls);
  void load_scripts();
  void set_members(std::vector<std::string> members);
  lease_round finish(clock::time_point start, const std::map<std::uint32_t, shard_lease>& before,
                     bool failed);
  static std::vector<std::string> member_names(const redisReply* r);

  // redis_ is declared before conn_, which keeps a reference to it.
  redis_options redis_;
  cluster_options cluster_;
  std::string name_;
  std::string members_key_;
  std::string lease_ms_;
  std::vector<std::string> lease_keys_;

  std::mutex mutex_;  // guards everything below
  connection conn_;
  std::vector<std::string> shas_;  // by lease_script, once SCRIPT LOAD answered
  std::map<std::uint32_t, shard_lease> held_;
  std::vector<std::string> members_;  // sorted, as of the last round
  std::vector<bool> mine_;            // by shard: this instance is the desired owner
};

// SCRIPT LOAD answers the SHA1 of a script, which depends on its text only:
// asked once per object, it holds across reconnects and server restarts.
void redis_shard_leases::load_scripts() {
  if (!shas_.empty()) return;
  std::vector<command> cmds(lease_script_count);
  for (int i = 0; i < lease_script_count; ++i)
    cmds[i].arg("SCRIPT").arg("LOAD").arg(lease_script_text(static_cast<lease_script>(i)));
  auto replies = conn_.exchange(cmds);
  std::vector<std::string> shas;
  for (const auto& r : replies) {
    if (r->type != REDIS_REPLY_STRING) throw_server_error("loading the lease scripts", r.get());
    shas.push_back(reply_text(r.get()));
  }
  shas_ = std::move(shas);
}

// Sends every call as EVALSHA in one pipeline; the calls the server answers
// NOSCRIPT (it restarted, or SCRIPT FLUSH) did not run and go again as EVAL.
// Any other error reply fails the whole round. Runs inside conn_.run().
std::vector<reply_ptr> redis_shard_leases::run_calls(const std::vector<call>& calls) {
  load_scripts();
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
  for (const call& c : calls) cmds.push_back(build(c, false));
  std::vector<reply_ptr> replies = conn_.exchange(cmds, true);
  std::vector<std::size_t> again;
  for (std::size_t i = 0; i < replies.size(); ++i)
    if (is_noscript(replies[i].get())) again.push_back(i);
  if (!again.empty()) {
    std::vector<command> evals;
    for (const std::size_t i : again) evals.push_back(build(calls[i], true));
    auto second = conn_.exchange(evals, true);
    for (std::size_t k = 0; k < again.size(); ++k) replies[again[k]] = std::move(second[k]);
  }
  for (const auto& r : replies)
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("lease script", r.get());
  return replies;
}

std::vector<std::string> redis_shard_leases::member_names(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY)
    throw redis_failure{errc::store_error, "members script: unexpected reply type"};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < r->elements; ++i) names.push_back(reply_text(r->element[i]));
  std::sort(names.begin(), names.end());
  return names;
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
  if (!failed) out.members = members_;
  const auto round = cluster_.lease / 3;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
  out.next_round_in = std::max(std::chrono::milliseconds{0}, round - spent);
  return out;
}

lease_round redis_shard_leases::renew(boost::system::error_code& ec) {
  std::lock_guard lock(mutex_);
  const auto before = held_;

  // Trip 1: renew what we hold, then heartbeat and read the members.
  std::vector<call> calls;
  std::vector<std::uint32_t> renewed;
  for (const auto& [s, l] : held_) {
    calls.push_back({lease_script::renew,
                     lease_keys_[s],
                     {cluster_.instance, std::to_string(l.token), lease_ms_}});
    renewed.push_back(s);
  }
  calls.push_back({lease_script::members, members_key_, {cluster_.instance, lease_ms_}});
  // Sent no earlier than this: the server's expiry is at least start + lease.
  const auto start = clock::now();
  std::vector<reply_ptr> replies;
  conn_.run("lease round", ec, [&] {
    replies = run_calls(calls);
    set_members(member_names(replies.back().get()));
  });
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
    if (mine_[it->first]) {
      ++it;
      continue;
    }
    calls.push_back({lease_script::release,
                     lease_keys_[it->first],
                     {cluster_.instance, std::to_string(it->second.token)}});
    it = held_.erase(it);
  }
  const std::size_t releases = calls.size();
  for (std::uint32_t s = 0; s < cluster_.shards; ++s) {
    if (!mine_[s] || held_.contains(s)) continue;
    calls.push_back({lease_script::acquire, lease_keys_[s], {cluster_.instance, lease_ms_}});
    acquiring.push_back(s);
  }
  if (calls.empty()) return finish(start, before, false);
  calls.push_back({lease_script::members, members_key_, {cluster_.instance, lease_ms_}});
  const auto start2 = clock::now();
  conn_.run("lease round", ec, [&] {
    replies = run_calls(calls);
    // The live set may have changed since trip 1; the next round acts on it.
    set_members(member_names(replies.back().get()));
  });
  if (ec) return finish(start, before, true);
  for (std::size_t i = 0; i < acquiring.size(); ++i) {
    const redisReply* r = replies[releases + i].get();
    if (r->type != REDIS_REPLY_INTEGER || r->integer <= 0) continue;
    held_[acquiring[i]] =
        shard_lease{acquiring[i], static_cast<std::uint64_t>(r->integer), start2 + cluster_.lease};
  }
  return finish(start, before, false);
}

void redis_shard_leases::release_all(boost::system::error_code& ec) {
  std::lock_guard lock(mutex_);
  std::vector<call> calls;
  for (const auto& [s, l] : held_)
    calls.push_back(
        {lease_script::release, lease_keys_[s], {cluster_.instance, std::to_string(l.token)}});
  calls.push_back({lease_script::leave, members_key_, {cluster_.instance}});
  held_.clear();
  members_.clear();
  mine_.clear();
  conn_.run("leaving the cluster", ec, [&] { run_calls(calls); });
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
