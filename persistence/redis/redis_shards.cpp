// redis_store's sharded layout (redis_options::shards > 0): write() split
// into one write-script call per shard, with fencing; list_due() and
// list_dead() merged across shards; the lease table. The layout itself is
// in docs/scale-out.md ("Keys").
//
// write(). The batch's changes are grouped by shard (in shard order; within
// a shard in the batch's order) and each group is one call of the sharded
// write script on that shard's keys (scripts.hpp): atomic per shard. On one
// server every call goes out in one pipeline and the replies are read
// after; on a Redis Cluster the shards may live on different nodes, and the
// calls run one shard after another, each routed to its slot's owner.
// Every group is sent even when an earlier one failed, so that a stale token
// on one shard does not keep the others' changes back (the engine wants
// those: they are its other shards). The outcome:
// - every group landed: success;
// - a group failed for another reason than its fence (an error reply, a
//   lost or timed-out connection): errc::outcome_unknown when another group
//   landed or may have, else that failure's code;
// - otherwise, a group refused for its fence: errc::lease_lost (every other
//   group landed). A worse failure wins over lease_lost, since the caller
//   must then treat the whole batch as unknown anyway.
#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "redis_backend.hpp"
#include "redis_shards.hpp"
#include "scripts.hpp"

namespace delayq {

using detail::redis::backend;

using detail::redis::connection;
using detail::redis::redis_failure;
using detail::redis::reply_text;

const detail::redis::backend::part& detail::redis::backend::part_of(std::string_view id) const {
  return opts.shards == 0 ? parts[0] : parts[shard_of(id, opts.shards)];
}

namespace {

enum class group_outcome { unsent, landed, fenced, failed };

// The outcome of one group's reply; a failure's description in `why`.
group_outcome classify(const redisReply* r, std::string& why) {
  if (r->type != REDIS_REPLY_ERROR) return group_outcome::landed;
  const std::string text = reply_text(r);
  why = text;
  return text.starts_with(detail::redis::fence_error_prefix) ? group_outcome::fenced
                                                             : group_outcome::failed;
}

}  // namespace

void detail::redis::backend::write_sharded(std::span<const store_change> changes,
                                           boost::system::error_code& ec) {
  ec = {};
  std::map<std::uint32_t, std::vector<store_change>> by_shard;
  for (const store_change& c : changes) {
    c.refused = false;
    by_shard[shard_of(c.task->id, opts.shards)].push_back(c);
  }
  // Encoded once, outside the lock and the retries.
  std::vector<const part*> where;
  std::vector<detail::redis::write_batch> batches;
  where.reserve(by_shard.size());
  batches.reserve(by_shard.size());
  for (const auto& [s, group] : by_shard) {
    const part& p = parts[s];
    where.push_back(&p);
    batches.emplace_back(p.keys, group, &p.shard);
  }
  const std::size_t n = batches.size();
  std::vector<group_outcome> outcome(n, group_outcome::unsent);
  std::vector<std::string> why(n);
  std::optional<errc> failure;  // the first failure of a whole call
  bool sent = false;            // bytes of some group reached a connection
  bool maybe_landed = false;    // groups whose outcome is not known

  // Its own connection: a write never waits behind the reads of the
  // store's connection (a shard read, a notice's find, the schedules'
  // scan), each a round trip that a slow link makes long (issue 33).
  std::lock_guard lock(shard_write_mutex);
  if (!opts.cluster) {
    shard_writes.run(slot, "write", ec, [&](connection& c) {
      for (const bool eval : {false, true}) {
        for (const auto& b : batches) {
          c.append_formatted(eval ? b.eval_head() : b.head(detail::redis::write_sha(c)));
          c.append_formatted(b.tail(), false);
        }
        sent = true;
        auto replies = c.read_replies(n, true);
        // Every group is sent again after a NOSCRIPT: running a group twice
        // is running it once (scripts.hpp).
        if (!eval && std::any_of(replies.begin(), replies.end(), [](const auto& r) {
              return detail::redis::is_noscript(r.get());
            })) {
          log(log_level::warning,
              name + ": the server lost the write script (NOSCRIPT); using EVAL");
          continue;
        }
        for (std::size_t k = 0; k < n; ++k) outcome[k] = classify(replies[k].get(), why[k]);
        return;
      }
    });
    if (ec) {
      failure = static_cast<errc>(ec.value());
      // The pipeline broke after it was sent: any group may have landed.
      maybe_landed = n > 1 && sent;
    }
  } else {
    for (std::size_t k = 0; k < n; ++k) {
      boost::system::error_code one;
      shard_writes.run(where[k]->slot, "write", one, [&](connection& c) {
        for (const bool eval : {false, true}) {
          const auto& b = batches[k];
          c.append_formatted(eval ? b.eval_head() : b.head(detail::redis::write_sha(c)));
          c.append_formatted(b.tail(), false);
          sent = true;
          auto replies = c.read_replies(1, true);
          if (!eval && detail::redis::is_noscript(replies[0].get())) continue;
          outcome[k] = classify(replies[0].get(), why[k]);
          return;
        }
      });
      if (one) {
        outcome[k] = group_outcome::failed;
        // A timed-out call may still land: worse than a refusal.
        if (!failure || one == errc::outcome_unknown) failure = static_cast<errc>(one.value());
      }
    }
  }

  std::size_t landed = 0;
  bool fenced = false;
  for (std::size_t k = 0; k < n; ++k) {
    if (outcome[k] == group_outcome::landed) ++landed;
    if (outcome[k] == group_outcome::fenced) {
      fenced = true;
      log(log_level::warning, name + ": write to shard " + std::to_string(where[k]->shard.shard) +
                                  " refused: " + why[k]);
    }
    if (outcome[k] == group_outcome::failed && !why[k].empty()) {
      log(log_level::error, name + ": write to shard " + std::to_string(where[k]->shard.shard) +
                                " failed: server replied: " + why[k]);
      if (!failure) failure = errc::store_error;
    }
  }
  ec = {};
  if (failure) {
    // Something landed, or may have (a pipeline broken after it was sent).
    const bool partial = landed > 0 || maybe_landed;
    ec = partial ? errc::outcome_unknown : *failure;
  } else if (fenced) {
    ec = errc::lease_lost;
    // Say which changes were refused: the caller drops the fenced ones and
    // writes the others again, and must not write again what landed (another
    // instance may have run and removed a task meanwhile).
    std::vector<bool> refused_shard(opts.shards, false);
    for (std::size_t k = 0; k < n; ++k)
      if (outcome[k] == group_outcome::fenced) refused_shard[where[k]->shard.shard] = true;
    for (const store_change& c : changes)
      c.refused = refused_shard[shard_of(c.task->id, opts.shards)];
  }
}

// ---- list_due() across shards --------------------------------------------
//
// A k-way merge that keeps no state between calls: each call reads a page
// of up to `limit` records after the cursor from every shard, and the order
// (due, id) of the union is known up to the smallest "last record read" of
// the shards whose page was full (beyond it, such a shard may hold records
// not read yet). The records up to that bound are taken in order, at most
// `limit` (an undecodable one counts, as in one shard's page, and only the
// ones taken are quarantined); when fewer than `limit` are known and some
// shard's page was full, the call reads again from the bound, so a call
// that returns fewer than `limit` records has seen the whole range. Cost per
// call: shards * limit records read (one page script per shard), at least.
list_summary detail::redis::backend::list_due_merged(due_cursor& after, std::int64_t until_ms,
                                                     std::size_t limit, std::vector<task>& out,
                                                     boost::system::error_code& ec) {
  ec = {};
  out.clear();
  list_summary summary;
  if (limit == 0) return summary;
  const auto before = [](const due_cursor& a, const due_cursor& b) {
    return std::tie(a.due_ms, a.id) < std::tie(b.due_ms, b.id);
  };
  struct taken_item {
    due_item item;
    const part* where;
  };
  std::vector<taken_item> taken;
  due_cursor from = after;
  due_cursor next;  // `after` once the call succeeded
  for (;;) {
    std::vector<taken_item> all;
    std::optional<due_cursor> bound;  // the smallest last record of a full page
    due_cursor furthest = from;       // the largest last record read
    for (const part& p : parts) {
      due_cursor c = from;
      std::vector<task> unused;
      std::vector<due_item> read;
      const list_summary got = list_due_part(p, c, until_ms, limit, unused, ec, &read);
      if (ec) return {};
      if (got.tasks + got.quarantined >= limit && (!bound || before(c, *bound))) bound = c;
      if (before(furthest, c)) furthest = c;
      for (due_item& item : read) all.push_back({std::move(item), &p});
    }
    std::sort(all.begin(), all.end(), [](const taken_item& a, const taken_item& b) {
      return std::tie(a.item.due_ms, a.item.id) < std::tie(b.item.due_ms, b.item.id);
    });
    for (taken_item& x : all) {
      if (taken.size() == limit) break;
      if (bound && std::tie(x.item.due_ms, x.item.id) > std::tie(bound->due_ms, bound->id)) break;
      taken.push_back(std::move(x));
    }
    if (taken.size() == limit) {
      next = due_cursor{taken.back().item.due_ms, taken.back().item.id};
      break;
    }
    if (!bound) {
      // Every shard's range is done: the cursor goes past all that was read
      // (as one shard's would, past an index entry without a record).
      next = furthest;
      break;
    }
    // Fewer than `limit` known up to the bound: read on from it (what is
    // taken stays: it is all before the bound).
    from = *bound;
  }
  // Quarantined before any task reaches the sink, each on its shard.
  std::map<const part*, std::vector<bad_record>> bad;
  for (taken_item& x : taken) {
    if (x.item.t) {
      out.push_back(std::move(*x.item.t));
      ++summary.tasks;
    } else {
      bad[x.where].push_back({x.item.id, x.item.raw, x.item.why});
      ++summary.quarantined;
    }
  }
  std::lock_guard lock(mutex);
  for (const auto& [p, records] : bad) {
    conn.run(p->slot, "list_due", ec, [&](connection& c) {
      quarantine(c, p->keys.tasks, p->keys.due, p->keys.quarantine, p->keys.quarantine_reason,
                 records, "record of task");
    });
    if (ec) {
      out.clear();
      return {};
    }
  }
  after = std::move(next);
  return summary;
}

// ---- list_dead() across shards -------------------------------------------
//
// The first offset + limit letters of every shard, merged by (died_at, id):
// O(shards * (offset + limit)) letters read for one page.
std::vector<dead_letter> detail::redis::backend::list_dead_merged(std::size_t offset,
                                                                  std::size_t limit,
                                                                  boost::system::error_code& ec) {
  ec = {};
  std::vector<dead_letter> all;
  if (limit == 0) return all;
  const std::size_t want = offset > SIZE_MAX - limit ? SIZE_MAX : offset + limit;
  for (const part& p : parts) {
    auto page = list_dead_part(p, 0, want, ec);
    if (ec) return {};
    for (dead_letter& d : page) all.push_back(std::move(d));
  }
  std::sort(all.begin(), all.end(), [](const dead_letter& a, const dead_letter& b) {
    const std::int64_t ta = to_epoch_ms(a.died_at), tb = to_epoch_ms(b.died_at);
    return ta != tb ? ta < tb : a.task.id < b.task.id;
  });
  if (offset >= all.size()) return {};
  std::vector<dead_letter> out;
  const std::size_t end = std::min(all.size(), want);
  out.reserve(end - offset);
  for (std::size_t i = offset; i < end; ++i) out.push_back(std::move(all[i]));
  return out;
}

// ---- switching to the sharded layout --------------------------------------
//
// One script reads the meta key and counts the unsharded records, and may
// record the shard count, so that the count is never recorded over records
// a server without --cluster saves at the same moment (every key it touches
// is under `{PREFIX}`: one slot, so it runs on a Redis Cluster too).

namespace {

// KEYS: meta, tasks, dead. ARGV: mode ('inspect', 'claim' or
// 'claim_if_empty'), this build's layout version, the shard count.
// Returns {layout or '', shards or '0', HLEN tasks, HLEN dead}.
const char* const layout_claim_script = R"lua(-- delayq layout inspection, layout 1
local layout = redis.call('HGET', KEYS[1], 'layout')
local shards = redis.call('HGET', KEYS[1], 'shards')
local tasks = redis.call('HLEN', KEYS[2])
local dead = redis.call('HLEN', KEYS[3])
if ARGV[1] ~= 'inspect' and (not layout or layout == ARGV[2]) and
   (not shards or shards == '0') and
   (ARGV[1] == 'claim' or (tasks == 0 and dead == 0)) then
  redis.call('HSET', KEYS[1], 'layout', ARGV[2], 'shards', ARGV[3])
  layout, shards = ARGV[2], ARGV[3]
end
return {layout or '', shards or '0', tasks, dead}
)lua";

redis_layout run_layout_script(const redis_options& options, const char* mode,
                               boost::system::error_code& ec, std::string* message) {
  ec = {};
  redis_layout out;
  // Connections without the write script: their handshake neither creates
  // the meta key nor minds the count it records (the script reads both).
  const redis_options opts = options;
  const std::string name = opts.describe();
  const detail::redis::store_keys keys(opts.prefix);
  const std::string layout = std::to_string(redis_store::layout_version);
  const std::string shards = std::to_string(options.shards);
  detail::redis::cluster_router router(opts, name, detail::redis::client_name_for(opts, ":layout"),
                                       detail::redis::store_handshake::reader(opts));
  std::optional<redis_failure> failure;
  {
    detail::redis::sigpipe_guard guard;
    failure = router.try_run(detail::redis::key_slot(keys.meta), [&](connection& c) {
      auto replies = c.exchange({detail::redis::command()
                                     .arg("EVAL")
                                     .arg(layout_claim_script)
                                     .arg("3")
                                     .arg(keys.meta)
                                     .arg(keys.tasks)
                                     .arg(keys.dead)
                                     .arg(mode)
                                     .arg(layout)
                                     .arg(shards)},
                                std::string_view(mode) != "inspect");
      const redisReply* r = replies[0].get();
      if (r->type == REDIS_REPLY_ERROR) detail::redis::throw_server_error("key layout check", r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
          r->element[2]->type != REDIS_REPLY_INTEGER || r->element[3]->type != REDIS_REPLY_INTEGER)
        throw redis_failure{errc::store_error, "unexpected reply to the key layout check"};
      const std::string stored_layout = reply_text(r->element[0]);
      const std::string stored_shards = reply_text(r->element[1]);
      if (!stored_layout.empty() && stored_layout != layout)
        throw redis_failure{errc::store_error, "key layout version '" + stored_layout + "' in " +
                                                   keys.meta + " is not " + layout +
                                                   ", the one this build uses"};
      std::uint32_t n = 0;
      const auto [end, parse_ec] =
          std::from_chars(stored_shards.data(), stored_shards.data() + stored_shards.size(), n);
      if (parse_ec != std::errc{} || end != stored_shards.data() + stored_shards.size())
        throw redis_failure{errc::store_error, "shard count '" + stored_shards + "' in " +
                                                   keys.meta + " is not a number"};
      out.created = !stored_layout.empty();
      out.shards = n;
      out.unsharded_tasks =
          static_cast<std::size_t>(std::max<long long>(0, r->element[2]->integer));
      out.unsharded_dead = static_cast<std::size_t>(std::max<long long>(0, r->element[3]->integer));
    });
  }
  if (failure) {
    ec = make_error_code(failure->code);
    if (message) *message = failure->message;
    return {};
  }
  return out;
}

}  // namespace

redis_layout redis_store::inspect_layout(const redis_options& options,
                                         boost::system::error_code& ec, std::string* message) {
  return run_layout_script(options, "inspect", ec, message);
}

redis_layout redis_store::claim_shards(const redis_options& options, bool only_if_empty,
                                       boost::system::error_code& ec, std::string* message) {
  if (options.shards == 0 || options.shards > 16384) {
    ec = errc::invalid_cluster_options;
    if (message) *message = "a shard count must be from 1 to 16384";
    return {};
  }
  return run_layout_script(options, only_if_empty ? "claim_if_empty" : "claim", ec, message);
}

// ---- the cluster interface ------------------------------------------------

std::unique_ptr<shard_leases> detail::redis::shards_role::make_shard_leases(
    const cluster_options& cluster, boost::system::error_code& ec) {
  ec = {};
  const backend& m = b_;
  if (cluster.shards != m.opts.shards) {
    ec = errc::shard_mismatch;
    log(log_level::error, m.name + ": a lease table for " + std::to_string(cluster.shards) +
                              " shards asked of a store of " + std::to_string(m.opts.shards));
    return nullptr;
  }
  return make_redis_shard_leases(m.opts, cluster, ec);
}

}  // namespace delayq
