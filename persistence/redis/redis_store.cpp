// redis_store: the store proper. Writes go through the write script
// (scripts.hpp): write() on the store's connection, async_write() through
// the pipeline (write_pipeline.hpp); list() streams on a connection of its
// own (redis_list.cpp); dead-letter reads, quarantine and settings are plain
// commands on the store's connection (connection.hpp).
#include "delayq/redis_store.hpp"

#include <algorithm>
#include <climits>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "redis_store_impl.hpp"
#include "scripts.hpp"
#include "write_pipeline.hpp"

namespace delayq {

using detail::redis::command;
using detail::redis::redis_failure;
using detail::redis::reply_text;
using detail::redis::throw_server_error;

redis_store::impl::impl(redis_options o)
    : opts(std::move(o)),
      name(opts.describe()),
      keys(opts.prefix),
      slot(detail::redis::key_slot(keys.tasks)),
      conn(opts, name, "", detail::redis::store_handshake::writer(opts)) {
  if (opts.shards == 0) {
    parts.push_back({keys, slot, {}});
    return;
  }
  parts.reserve(opts.shards);
  for (std::uint32_t s = 0; s < opts.shards; ++s) {
    detail::redis::store_keys k(opts.prefix, s);
    const unsigned k_slot = detail::redis::key_slot(k.tasks);
    parts.push_back(
        {std::move(k), k_slot, {s, redis_lease_key(opts.prefix, s), opts.prefix + ":notify"}});
  }
}

redis_store::impl::~impl() = default;

// Sends one batch as EVALSHA (EVAL when the server lost the script) and
// checks the reply. Runs inside conn.run(), under the mutex.
void redis_store::impl::send(detail::redis::connection& c,
                             const detail::redis::write_batch& batch) {
  for (const bool eval : {false, true}) {
    c.append_formatted(eval ? batch.eval_head() : batch.head(detail::redis::write_sha(c)));
    c.append_formatted(batch.tail(), false);
    auto replies = c.read_replies(1, true);
    const redisReply* r = replies[0].get();
    if (!eval && detail::redis::is_noscript(r)) {
      log(log_level::warning, name + ": the server lost the write script (NOSCRIPT); using EVAL");
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("write", r);
    return;
  }
}

std::size_t redis_store::impl::quarantine(detail::redis::connection& c, const std::string& hash,
                                          const std::string& index, const std::string& q,
                                          const std::string& q_reason,
                                          const std::vector<bad_record>& bad, const char* kind) {
  if (bad.empty()) return 0;
  std::vector<command> cmds;
  cmds.reserve(bad.size());
  for (const bad_record& b : bad)
    cmds.push_back(std::move(
        detail::redis::quarantine_call(detail::redis::quarantine_script, hash, index, q, q_reason)
            .arg(b.id)
            .arg(b.raw)
            .arg(b.why)));
  auto moved = c.exchange(cmds);
  std::size_t n = 0;
  for (std::size_t k = 0; k < bad.size(); ++k) {
    const redisReply* r = moved[k].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("quarantine", r);
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
      ++n;
      log(log_level::error, name + ": quarantined undecodable " + kind + " '" +
                                std::string(bad[k].id) + "' in " + q + ": " + bad[k].why);
    }
  }
  return n;
}

std::optional<dead_letter> redis_store::impl::decode_dead(std::string_view id, std::string_view raw,
                                                          std::string& why) {
  boost::system::error_code dec;
  dead_letter d = decode_dead_letter(raw, dec, &why);
  if (dec) return std::nullopt;
  if (d.task.id != id) {
    why = "record holds id '" + d.task.id + "'";
    return std::nullopt;
  }
  return d;
}

void redis_store::impl::connect() {
  // Dials the node of the store's slot; in a cluster, checks the key layout
  // there (the handshake does it without one).
  if (auto f = conn.try_run(slot, [&](detail::redis::connection& c) {
        if (opts.cluster) detail::redis::check_store_layout(c, opts);
      }))
    throw *f;
}

detail::redis::write_pipeline& redis_store::impl::writer() {
  std::lock_guard lock(pipeline_mutex);
  if (!pipeline) pipeline = std::make_unique<detail::redis::write_pipeline>(opts, name, slot);
  return *pipeline;
}

redis_store::redis_store(std::unique_ptr<impl> m) : impl_(std::move(m)) {}

redis_store::redis_store(redis_options options)
    : impl_(std::make_unique<impl>(std::move(options))) {
  detail::redis::sigpipe_guard guard;
  try {
    impl_->connect();
  } catch (const redis_failure& f) {
    throw boost::system::system_error(make_error_code(f.code),
                                      "delayq: " + impl_->name + ": " + f.message);
  }
}

std::unique_ptr<redis_store> redis_store::open(redis_options options, boost::system::error_code& ec,
                                               std::string* message) {
  ec = {};
  auto m = std::make_unique<impl>(std::move(options));
  detail::redis::sigpipe_guard guard;
  try {
    m->connect();
  } catch (const redis_failure& f) {
    ec = make_error_code(f.code);
    if (message) *message = f.message;
    return nullptr;
  }
  return std::unique_ptr<redis_store>(new redis_store(std::move(m)));
}

redis_store::~redis_store() = default;

std::string redis_store::describe() const { return impl_->name; }

const redis_options& redis_store::options() const noexcept { return impl_->opts; }

// ---- writes ---------------------------------------------------------------

void redis_store::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  ec = {};
  if (changes.empty()) return;
  impl& m = *impl_;
  if (m.shards() != 0) return m.write_sharded(changes, ec);
  // Encoded once, outside the lock and the retry.
  const detail::redis::write_batch batch(m.keys, changes);
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "write", ec, [&](detail::redis::connection& c) { m.send(c, batch); });
}

void redis_store::async_write(std::span<const store_change> changes,
                              std::function<void(boost::system::error_code)> done) {
  impl& m = *impl_;
  if (m.shards() != 0) {
    // One batch may span several slots, and the pipeline writes one slot.
    boost::system::error_code ec;
    write(changes, ec);
    done(ec);
    return;
  }
  auto batch = std::make_unique<detail::redis::write_batch>(m.keys, changes);
  m.writer().submit(std::move(batch), std::move(done));
}

std::size_t redis_store::max_writes_in_flight() const noexcept {
  return impl_->shards() != 0 ? 1 : writes_in_flight;
}

namespace {

// The one-kind calls as write() batches.
template <class Range, class Change>
std::vector<store_change> changes_of(const Range& items, Change&& make) {
  std::vector<store_change> out;
  out.reserve(items.size());
  for (const auto& item : items) out.push_back(make(item));
  return out;
}

std::vector<task> id_only(std::span<const std::string> ids) {
  std::vector<task> out(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) out[i].id = ids[i];
  return out;
}

}  // namespace

void redis_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  write(changes_of(tasks, [](const task& t) { return store_change{change_kind::save, &t}; }), ec);
}

void redis_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  const std::vector<task> tasks = id_only(ids);
  write(changes_of(tasks, [](const task& t) { return store_change{change_kind::remove, &t}; }), ec);
}

void redis_store::bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
  write(changes_of(letters,
                   [](const dead_letter& d) {
                     return store_change{change_kind::bury, &d.task, d.error, d.died_at};
                   }),
        ec);
}

void redis_store::revive(std::span<const task> tasks, boost::system::error_code& ec) {
  write(changes_of(tasks, [](const task& t) { return store_change{change_kind::revive, &t}; }), ec);
}

void redis_store::purge(std::span<const std::string> ids, boost::system::error_code& ec) {
  const std::vector<task> tasks = id_only(ids);
  write(changes_of(tasks, [](const task& t) { return store_change{change_kind::purge, &t}; }), ec);
}

// ---- quarantine and settings ---------------------------------------------

void redis_store::quarantine(std::string_view id, std::string_view reason,
                             boost::system::error_code& ec) {
  impl& m = *impl_;
  const impl::part& p = m.part_of(id);
  std::lock_guard lock(m.mutex);
  m.conn.run(p.slot, "quarantine", ec, [&](detail::redis::connection& c) {
    auto replies = c.exchange(
        {detail::redis::quarantine_call(detail::redis::quarantine_id_script, p.keys.tasks,
                                        p.keys.due, p.keys.quarantine, p.keys.quarantine_reason)
             .arg(id)
             .arg(reason)},
        true);
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("quarantine", r);
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
      log(log_level::error, m.name + ": quarantined task '" + std::string(id) + "' in " +
                                p.keys.quarantine + ": " + std::string(reason));
  });
}

std::vector<std::pair<std::string, std::string>> redis_store::load_settings(
    boost::system::error_code& ec) {
  impl& m = *impl_;
  std::vector<std::pair<std::string, std::string>> out;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "load_settings", ec, [&](detail::redis::connection& c) {
    out.clear();
    auto replies = c.exchange({command().arg("HGETALL").arg(m.keys.settings)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("HGETALL", r);
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
      throw redis_failure{errc::store_error, "unexpected HGETALL reply"};
    out.reserve(r->elements / 2);
    for (std::size_t i = 0; i < r->elements; i += 2)
      out.emplace_back(reply_text(r->element[i]), reply_text(r->element[i + 1]));
  });
  if (ec) out.clear();
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The sharded layout announces a changed setting on the notice channel, so
// every instance of a cluster rereads it (redis_listener.cpp parses
// "setting KEY"). Sent only once the change's own reply came back without
// an error or a redirect (a second exchange: on a Redis Cluster a MOVED
// reply is seen only after every reply of an exchange was read), so a
// notice never comes before what it announces. A retry after a lost
// connection may announce a change twice, which costs a reread. PUBLISH has
// no key: any node of a Redis Cluster takes it and spreads it to all. The
// notice is best effort: once the change landed the call succeeds, and a
// notice that could not be sent is logged (engines reread their settings
// every minute anyway).
struct setting_notice {
  setting_notice(const redis_options& opts, std::string_view key)
      : on(opts.shards != 0), channel(opts.prefix + ":notify"), message("setting ") {
    message += key;
  }
  void send(detail::redis::connection& c, const std::string& store_name) const {
    if (!on) return;
    std::string why;
    try {
      auto replies = c.exchange({command().arg("PUBLISH").arg(channel).arg(message)}, true);
      if (replies[0]->type == REDIS_REPLY_ERROR) why = reply_text(replies[0].get());
    } catch (const redis_failure& f) {
      why = f.message;  // the connection was dropped: the next call dials again
    }
    if (!why.empty())
      log(log_level::warning, store_name + ": the notice of a changed setting (" + message +
                                  ") was not sent: " + why +
                                  "; other instances see the change at their next reread");
  }
  bool on;
  std::string channel;  // the command borrows these two
  std::string message;
};

}  // namespace

void redis_store::save_setting(std::string_view key, std::string_view value,
                               boost::system::error_code& ec) {
  impl& m = *impl_;
  const setting_notice notice(m.opts, key);
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "save_setting", ec, [&](detail::redis::connection& c) {
    auto replies =
        c.exchange({command().arg("HSET").arg(m.keys.settings).arg(key).arg(value)}, true);
    if (replies[0]->type == REDIS_REPLY_ERROR) throw_server_error("HSET", replies[0].get());
    notice.send(c, m.name);
  });
}

bool redis_store::erase_setting(std::string_view key, boost::system::error_code& ec) {
  impl& m = *impl_;
  const setting_notice notice(m.opts, key);
  bool erased = false;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "erase_setting", ec, [&](detail::redis::connection& c) {
    auto replies = c.exchange({command().arg("HDEL").arg(m.keys.settings).arg(key)}, true);
    if (replies[0]->type == REDIS_REPLY_ERROR) throw_server_error("HDEL", replies[0].get());
    if (replies[0]->type != REDIS_REPLY_INTEGER)
      throw redis_failure{errc::store_error, "unexpected HDEL reply"};
    erased = replies[0]->integer > 0;
    notice.send(c, m.name);
  });
  return erased && !ec;
}

// ---- sequences -------------------------------------------------------------

// A sequence is a field of the hash `{PREFIX}:sequences` holding the last
// number handed out (absent: none yet). HINCRBY is atomic on the server;
// numbers are Redis integers, so a sequence ends at 2^63 - 1.

std::uint64_t redis_store::allocate(std::string_view name, std::uint64_t count,
                                    boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, count) || count > most) {
    ec = errc::invalid_options;
    return 0;
  }
  impl& m = *impl_;
  const std::string by = std::to_string(count);
  std::uint64_t first = 0;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "allocate", ec, [&](detail::redis::connection& c) {
    auto replies =
        c.exchange({command().arg("HINCRBY").arg(m.keys.sequences).arg(name).arg(by)}, true);
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) {
      // "increment or decrement would overflow": the sequence is used up.
      if (reply_text(r).find("overflow") != std::string::npos)
        throw redis_failure{errc::invalid_options,
                            "sequence '" + std::string(name) + "' would pass 2^63 - 1"};
      throw_server_error("HINCRBY", r);
    }
    if (r->type != REDIS_REPLY_INTEGER || r->integer < static_cast<long long>(count))
      throw redis_failure{errc::store_error, "unexpected HINCRBY reply"};
    first = static_cast<std::uint64_t>(r->integer) - count + 1;
  });
  return ec ? 0 : first;
}

void redis_store::raise_to(std::string_view name, std::uint64_t next,
                           boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, 1) || next > most) {
    ec = errc::invalid_options;
    return;
  }
  if (next <= 1) return;  // every sequence hands out 1 or more next
  impl& m = *impl_;
  const std::string last = std::to_string(next - 1);  // the field holds the last one handed out
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "raise_to", ec, [&](detail::redis::connection& c) {
    auto replies = c.exchange({command()
                                   .arg("EVAL")
                                   .arg(detail::redis::sequence_raise_script)
                                   .arg("1")
                                   .arg(m.keys.sequences)
                                   .arg(name)
                                   .arg(last)},
                              true);
    if (replies[0]->type == REDIS_REPLY_ERROR) throw_server_error("raise_to", replies[0].get());
  });
}

// ---- dead-letter reads ----------------------------------------------------

std::size_t redis_store::count_dead(boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  std::size_t total = 0;
  std::lock_guard lock(m.mutex);
  // One HLEN per part (per shard, sharded: O(shards) round trips).
  for (const impl::part& p : m.parts) {
    std::size_t n = 0;
    m.conn.run(p.slot, "count_dead", ec, [&](detail::redis::connection& c) {
      auto replies = c.exchange({command().arg("HLEN").arg(p.keys.dead)});
      const redisReply* r = replies[0].get();
      if (r->type == REDIS_REPLY_ERROR) throw_server_error("HLEN", r);
      if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
        throw redis_failure{errc::store_error, "unexpected HLEN reply"};
      n = static_cast<std::size_t>(r->integer);
    });
    if (ec) return 0;
    total += n;
  }
  return total;
}

std::optional<dead_letter> redis_store::find_dead(std::string_view id,
                                                  boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  std::optional<dead_letter> found;
  const impl::part& p = m.part_of(id);
  std::lock_guard lock(m.mutex);
  m.conn.run(p.slot, "find_dead", ec, [&](detail::redis::connection& c) {
    found.reset();
    auto replies = c.exchange({command().arg("HGET").arg(p.keys.dead).arg(id)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("HGET", r);
    if (r->type == REDIS_REPLY_NIL) return;
    if (r->type != REDIS_REPLY_STRING)
      throw redis_failure{errc::store_error, "unexpected HGET reply"};
    const std::string_view raw(r->str, r->len);
    std::string why;
    found = impl::decode_dead(id, raw, why);
    if (!found)
      m.quarantine(c, p.keys.dead, p.keys.dead_by_time, p.keys.dead_quarantine,
                   p.keys.dead_quarantine_reason, {{id, raw, std::move(why)}},
                   "dead-letter record of task");
  });
  if (ec) found.reset();
  return found;
}

std::vector<dead_letter> redis_store::list_dead(std::size_t offset, std::size_t limit,
                                                boost::system::error_code& ec) {
  impl& m = *impl_;
  if (m.shards() == 0) return m.list_dead_part(m.parts[0], offset, limit, ec);
  return m.list_dead_merged(offset, limit, ec);
}

std::vector<dead_letter> redis_store::impl::list_dead_part(const part& p, std::size_t offset,
                                                           std::size_t limit,
                                                           boost::system::error_code& ec) {
  ec = {};
  std::vector<dead_letter> out;
  // ZRANGE takes signed 64-bit ranks; no sorted set holds LLONG_MAX members.
  constexpr auto max_rank = static_cast<unsigned long long>(LLONG_MAX);
  if (limit == 0 || offset > max_rank) return out;
  const std::string start = std::to_string(offset);
  // The last rank, or -1 ("to the end") when offset + limit - 1 passes it.
  const std::string stop =
      limit - 1 > max_rank - offset ? std::string("-1") : std::to_string(offset + limit - 1);
  impl& m = *this;
  std::lock_guard lock(m.mutex);
  m.conn.run(p.slot, "list_dead", ec, [&](detail::redis::connection& c) {
    while (true) {
      out.clear();
      auto ranged =
          c.exchange({command().arg("ZRANGE").arg(p.keys.dead_by_time).arg(start).arg(stop)});
      const redisReply* ids = ranged[0].get();
      if (ids->type == REDIS_REPLY_ERROR) throw_server_error("ZRANGE", ids);
      if (ids->type != REDIS_REPLY_ARRAY)
        throw redis_failure{errc::store_error, "unexpected ZRANGE reply"};
      if (ids->elements == 0) return;
      command hmget;
      hmget.arg("HMGET").arg(p.keys.dead);
      for (std::size_t i = 0; i < ids->elements; ++i)
        hmget.arg(std::string_view(ids->element[i]->str, ids->element[i]->len));
      auto fetched = c.exchange({std::move(hmget)});
      const redisReply* records = fetched[0].get();
      if (records->type == REDIS_REPLY_ERROR) throw_server_error("HMGET", records);
      if (records->type != REDIS_REPLY_ARRAY || records->elements != ids->elements)
        throw redis_failure{errc::store_error, "unexpected HMGET reply"};

      std::vector<bad_record> bad;
      std::vector<std::string_view> dangling;
      out.reserve(ids->elements);
      for (std::size_t i = 0; i < ids->elements; ++i) {
        const std::string_view id(ids->element[i]->str, ids->element[i]->len);
        const redisReply* rec = records->element[i];
        if (rec->type != REDIS_REPLY_STRING) {
          dangling.push_back(id);  // purged since the ZRANGE, or an index left behind
          continue;
        }
        const std::string_view raw(rec->str, rec->len);
        std::string why;
        if (auto d = decode_dead(id, raw, why))
          out.push_back(std::move(*d));
        else
          bad.push_back({id, raw, std::move(why)});
      }
      if (bad.empty() && dangling.empty()) return;
      std::size_t changed =
          m.quarantine(c, p.keys.dead, p.keys.dead_by_time, p.keys.dead_quarantine,
                       p.keys.dead_quarantine_reason, bad, "dead-letter record of task");
      if (!dangling.empty()) {
        std::vector<command> cmds;
        for (std::string_view id : dangling)
          cmds.push_back(std::move(command()
                                       .arg("EVAL")
                                       .arg(detail::redis::drop_dangling_script)
                                       .arg("2")
                                       .arg(p.keys.dead)
                                       .arg(p.keys.dead_by_time)
                                       .arg(id)));
        auto dropped = c.exchange(cmds);
        for (std::size_t k = 0; k < dropped.size(); ++k) {
          const redisReply* r = dropped[k].get();
          if (r->type == REDIS_REPLY_ERROR) throw_server_error("drop index entry", r);
          if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
            ++changed;
            log(log_level::warning, m.name + ": dropped '" + std::string(dangling[k]) + "' from " +
                                        p.keys.dead_by_time + ": no record in " + p.keys.dead);
          }
        }
      }
      // Removing members shifted the ranks after them: read the page again
      // so that it, and the pages after it, skip no good letter. Every pass
      // that gets here removed at least one member, so this ends.
      if (changed == 0) return;
    }
  });
  if (ec) out.clear();
  return out;
}

}  // namespace delayq
