// The dead-letter role of the Redis store (redis_dead_letters.hpp). The
// merged read of the sharded layout is backend::list_dead_merged()
// (redis_shards.cpp).
#include "redis_dead_letters.hpp"

#include <climits>

#include "../roles/dead_record.hpp"
#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "scripts.hpp"

namespace delayq::detail::redis {

std::size_t dead_letters_role::count_dead(boost::system::error_code& ec) {
  ec = {};
  backend& m = b_;
  std::size_t total = 0;
  std::lock_guard lock(m.mutex);
  // One HLEN per part (per shard, sharded: O(shards) round trips).
  for (const backend::part& p : m.parts) {
    std::size_t n = 0;
    m.conn.run(p.slot, "count_dead", ec, [&](connection& c) {
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

std::optional<dead_letter> dead_letters_role::find_dead(std::string_view id,
                                                        boost::system::error_code& ec) {
  ec = {};
  backend& m = b_;
  std::optional<dead_letter> found;
  const backend::part& p = m.part_of(id);
  std::lock_guard lock(m.mutex);
  m.conn.run(p.slot, "find_dead", ec, [&](connection& c) {
    found.reset();
    auto replies = c.exchange({command().arg("HGET").arg(p.keys.dead).arg(id)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("HGET", r);
    if (r->type == REDIS_REPLY_NIL) return;
    if (r->type != REDIS_REPLY_STRING)
      throw redis_failure{errc::store_error, "unexpected HGET reply"};
    const std::string_view raw(r->str, r->len);
    std::string why;
    found = roles::decode_dead(id, raw, why);
    if (!found)
      m.quarantine(c, p.keys.dead, p.keys.dead_by_time, p.keys.dead_quarantine,
                   p.keys.dead_quarantine_reason, {{id, raw, std::move(why)}},
                   "dead-letter record of task");
  });
  if (ec) found.reset();
  return found;
}

std::vector<dead_letter> dead_letters_role::list_dead(std::size_t offset, std::size_t limit,
                                                      boost::system::error_code& ec) {
  backend& m = b_;
  if (m.shards() == 0) return m.list_dead_part(m.parts[0], offset, limit, ec);
  return m.list_dead_merged(offset, limit, ec);
}

std::vector<dead_letter> backend::list_dead_part(const part& p, std::size_t offset,
                                                 std::size_t limit, boost::system::error_code& ec) {
  ec = {};
  std::vector<dead_letter> out;
  // ZRANGE takes signed 64-bit ranks; no sorted set holds LLONG_MAX members.
  constexpr auto max_rank = static_cast<unsigned long long>(LLONG_MAX);
  if (limit == 0 || offset > max_rank) return out;
  const std::string start = std::to_string(offset);
  // The last rank, or -1 ("to the end") when offset + limit - 1 passes it.
  const std::string stop =
      limit - 1 > max_rank - offset ? std::string("-1") : std::to_string(offset + limit - 1);
  backend& m = *this;
  std::lock_guard lock(m.mutex);
  m.conn.run(p.slot, "list_dead", ec, [&](connection& c) {
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
        if (auto d = roles::decode_dead(id, raw, why))
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
                                       .arg(drop_dangling_script)
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

}  // namespace delayq::detail::redis
