// persistence/postgres/pg_batch.cpp - see pg_batch.hpp.
#include "pg_batch.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "delayq/record_codec.hpp"
#include "delayq/shard_leases.hpp"

namespace delayq::detail::pg {
namespace {

// An id's last change to one area.
struct live_final {
  bool upsert = false;
  const store_change* change = nullptr;
};
struct dead_final {
  bool upsert = false;
  const store_change* change = nullptr;
};

}  // namespace

std::string percent_encode(std::string_view bytes) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size());
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c > 0x20 && c < 0x7f && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

bool percent_decode(std::string_view text, std::string& out) {
  out.clear();
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return false;
    const int hi = nibble(text[i + 1]), lo = nibble(text[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

std::string task_notice_line(std::uint32_t shard, std::int64_t due_ms, std::string_view id) {
  return "t " + std::to_string(shard) + " " + std::to_string(due_ms) + " " + percent_encode(id);
}

std::string setting_notice_line(std::string_view key) { return "s " + percent_encode(key); }

write_batch make_batch(const schema_sql& sql, std::uint32_t shards, int gen,
                       std::span<const store_change> changes) {
  write_batch b;
  // Last change per id and area; the order of first appearance keeps the
  // statements deterministic.
  std::unordered_map<std::string_view, std::size_t> live_at, dead_at;
  std::vector<std::pair<std::string_view, live_final>> live;
  std::vector<std::pair<std::string_view, dead_final>> dead;
  // Per shard: the token its fenced changes carry (-1: two different ones,
  // which no lease carries at once: the part is refused).
  std::map<std::uint32_t, std::int64_t> fence;
  b.change_shards.reserve(changes.size());
  for (const store_change& c : changes) {
    if (c.task == nullptr) throw pg_failure{errc::store_error, "a change without a task"};
    c.refused = false;
    const std::string_view id = c.task->id;
    const std::uint32_t shard = shards == 0 ? 0 : shard_of(id, shards);
    b.change_shards.push_back(shard);
    if (shards != 0 && c.fence != 0) {
      const auto token = static_cast<std::int64_t>(c.fence);
      const auto [it, fresh] = fence.emplace(shard, token);
      if (!fresh && it->second != token) it->second = -1;
    }
    const auto set_live = [&](bool upsert) {
      const auto [it, fresh] = live_at.emplace(id, live.size());
      if (fresh)
        live.push_back({id, {upsert, &c}});
      else
        live[it->second].second = {upsert, &c};
    };
    const auto set_dead = [&](bool upsert) {
      const auto [it, fresh] = dead_at.emplace(id, dead.size());
      if (fresh)
        dead.push_back({id, {upsert, &c}});
      else
        dead[it->second].second = {upsert, &c};
    };
    switch (c.what) {
      case change_kind::save: set_live(true); break;
      case change_kind::remove: set_live(false); break;
      case change_kind::bury:
        set_live(false);
        set_dead(true);
        break;
      case change_kind::revive:
        set_dead(false);
        set_live(true);
        break;
      case change_kind::purge: set_dead(false); break;
      default: throw pg_failure{errc::store_error, "unknown change kind"};
    }
  }

  // Encode. Views into `records` stay valid: it never grows past this.
  b.records.reserve(live.size() + dead.size());
  std::map<std::uint32_t, std::vector<std::string>> notices;  // per shard part
  for (const auto& [id, f] : live) {
    if (!f.upsert) {
      b.live_delete.push_back(id);
      continue;
    }
    const task& t = *f.change->task;
    b.records.push_back(encode_task(t));
    const std::uint32_t shard = shards == 0 ? 0 : shard_of(id, shards);
    b.live_ids.push_back(id);
    b.live_records.push_back(b.records.back());
    b.live_shards.push_back(static_cast<std::int32_t>(shard));
    b.live_due.push_back(to_epoch_ms(t.due));
    // The owner of a shard learns of a task another instance saved into it
    // from this notice; a fenced save comes from the owner itself.
    if (shards != 0 && f.change->fence == 0)
      notices[shard].push_back(task_notice_line(shard, b.live_due.back(), id));
  }
  for (const auto& [id, f] : dead) {
    const std::uint32_t shard = shards == 0 ? 0 : shard_of(id, shards);
    if (!f.upsert) {
      b.dead_delete.push_back(id);
      b.dead_delete_shards.push_back(static_cast<std::int32_t>(shard));
      continue;
    }
    const store_change& c = *f.change;
    b.records.push_back(encode_dead_letter(dead_letter{*c.task, std::string(c.error), c.died_at}));
    b.dead_ids.push_back(id);
    b.dead_records.push_back(b.records.back());
    b.dead_died.push_back(to_epoch_ms(c.died_at));
    b.dead_shards.push_back(static_cast<std::int32_t>(shard));
  }
  for (const auto& [shard, token] : fence) {
    b.fence_shards.push_back(static_cast<std::int32_t>(shard));
    b.fence_tokens.push_back(token);
  }
  for (auto& [shard, lines] : notices) {
    std::string payload;
    for (std::string& line : lines) {
      if (!payload.empty() && payload.size() + 1 + line.size() > max_notice_payload) {
        b.payloads.push_back(std::move(payload));
        b.payload_shards.push_back(static_cast<std::int32_t>(shard));
        payload.clear();
      }
      if (!payload.empty()) payload.push_back('\n');
      payload += line;
    }
    if (!payload.empty()) {
      b.payloads.push_back(std::move(payload));
      b.payload_shards.push_back(static_cast<std::int32_t>(shard));
    }
  }
  for (const std::string& p : b.payloads) b.payload_views.push_back(p);

  // The statements.
  const bool fenced = !b.fence_shards.empty();
  b.fenced = fenced;
  const auto add_fence = [&](params& a) {
    a.int4_array(b.fence_shards).int8_array(b.fence_tokens);
  };
  if (!b.live_delete.empty()) {
    statement& s = b.stmts.emplace_back();
    s.name = fenced ? "dq_dlf" : "dq_dl";
    s.sql = fenced ? sql.delete_live_fenced : sql.delete_live;
    s.args.bytea_array(b.live_delete);
    if (fenced) add_fence(s.args);
  }
  if (!b.live_ids.empty()) {
    const int other = 1 - gen;
    statement& d = b.stmts.emplace_back();
    d.name = fenced ? (other == 0 ? "dq_dg0f" : "dq_dg1f") : (other == 0 ? "dq_dg0" : "dq_dg1");
    d.sql = fenced ? sql.delete_gen_fenced[other] : sql.delete_gen[other];
    d.args.bytea_array(b.live_ids);
    if (fenced) add_fence(d.args);
    statement& s = b.stmts.emplace_back();
    s.name = fenced ? (gen == 0 ? "dq_ug0f" : "dq_ug1f") : (gen == 0 ? "dq_ug0" : "dq_ug1");
    s.sql = fenced ? sql.upsert_gen_fenced[gen] : sql.upsert_gen[gen];
    s.args.int4_array(b.live_shards)
        .bytea_array(b.live_ids)
        .int8_array(b.live_due)
        .bytea_array(b.live_records);
    if (fenced) add_fence(s.args);
  }
  if (!b.dead_delete.empty()) {
    statement& s = b.stmts.emplace_back();
    s.name = fenced ? "dq_ddf" : "dq_dd";
    s.sql = fenced ? sql.delete_dead_fenced : sql.delete_dead;
    s.args.bytea_array(b.dead_delete);
    if (fenced) {
      s.args.int4_array(b.dead_delete_shards);
      add_fence(s.args);
    }
  }
  if (!b.dead_ids.empty()) {
    statement& s = b.stmts.emplace_back();
    s.name = fenced ? "dq_udf" : "dq_ud";
    s.sql = fenced ? sql.upsert_dead_fenced : sql.upsert_dead;
    s.args.bytea_array(b.dead_ids).int8_array(b.dead_died).bytea_array(b.dead_records);
    if (fenced) {
      s.args.int4_array(b.dead_shards);
      add_fence(s.args);
    }
  }
  if (!b.payloads.empty()) {
    statement& s = b.stmts.emplace_back();
    s.name = "dq_nt";
    s.sql = sql.notify_fenced;
    s.args.text(sql.channel).int4_array(b.payload_shards).text_array(b.payload_views);
    add_fence(s.args);
  }
  if (fenced) {
    statement& s = b.stmts.emplace_back();
    s.name = "dq_rf";
    s.sql = sql.refused;
    add_fence(s.args);
  }
  return b;
}

void settle_batch(const write_batch& b, std::span<const store_change> changes,
                  const std::vector<result_ptr>& results, boost::system::error_code& ec) {
  ec = {};
  if (!b.fenced || results.empty() || !results.back()) return;
  const PGresult* r = results.back().get();
  const int n = PQntuples(r);
  if (n == 0) return;
  std::vector<std::uint32_t> refused;
  for (int i = 0; i < n; ++i) refused.push_back(static_cast<std::uint32_t>(get_int4(r, i, 0)));
  std::sort(refused.begin(), refused.end());
  for (std::size_t i = 0; i < changes.size(); ++i)
    changes[i].refused = std::binary_search(refused.begin(), refused.end(), b.change_shards[i]);
  ec = errc::lease_lost;
}

}  // namespace delayq::detail::pg
