// persistence/postgres/pg_leases.cpp - the shard lease table in PostgreSQL
// (pg_shards.hpp). The round's logic is lease_book's; here is what the
// database does:
//
//   acquire  INSERT ... ON CONFLICT (shard) DO UPDATE, taking a row only when
//            it is free (no owner) or expired, or already this incarnation's
//            (a retried acquire keeps its token); a new token is the old one
//            + 1. The row lock makes two acquirers of one shard take turns:
//            the second re-reads the row and finds it taken.
//   renew    UPDATE the rows this incarnation holds with the tokens it holds.
//   release  the same, clearing owner and expiry; the token stays, so it
//            only ever grows.
//   members  delete the expired, upsert our heartbeat, read the live ones,
//            with the database's clock.
// Expiry is judged by the database server's clock (clock_timestamp()), so
// the instances' clocks do not matter. The statements of a trip are one
// transaction: the heartbeat commits with the lease writes, never before.
#include <algorithm>
#include <mutex>
#include <random>

#include "../roles/lease_book.hpp"
#include "delayq/log.hpp"
#include "pg_shards.hpp"

namespace delayq::detail::pg {
namespace {

using clock = std::chrono::steady_clock;

// 128 random bits, in hex.
std::string new_incarnation() {
  std::random_device rd;
  char out[33];
  for (int i = 0; i < 4; ++i) std::snprintf(out + 8 * i, 9, "%08x", static_cast<unsigned>(rd()));
  return std::string(out, 32);
}

const char* const now_cte =
    "WITH n AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8 AS ms) ";

struct lease_sql {
  explicit lease_sql(const schema_sql& s) {
    // Every statement locks lease rows in ascending shard order (the
    // `locked` CTE here, the ORDER BY of acquire, the fence's ORDER BY):
    // two rounds, or a round and a fenced write, never wait on each other
    // in a circle (a deadlock, which fails a round).
    const std::string held =
        ", h AS (SELECT * FROM unnest($1::int4[], $2::int8[]) AS h(shard, token)), "
        "locked AS (SELECT l.shard FROM " +
        s.leases + " l JOIN h ON h.shard = l.shard ORDER BY l.shard FOR UPDATE OF l) ";
    renew = std::string(now_cte) + held + "UPDATE " + s.leases +
            " l SET expires_ms = n.ms + $5 FROM n, h, locked WHERE l.shard = locked.shard AND "
            "l.shard = h.shard AND l.token = h.token AND l.owner = $3 AND l.incarnation = $4 "
            "RETURNING l.shard";
    release = std::string(now_cte) + held + "UPDATE " + s.leases +
              " l SET owner = NULL, incarnation = NULL, expires_ms = 0 FROM h, locked WHERE "
              "l.shard = locked.shard AND l.shard = h.shard AND l.token = h.token AND "
              "l.owner = $3 AND l.incarnation = $4";
    acquire = std::string(now_cte) + "INSERT INTO " + s.leases +
              " AS l (shard, owner, incarnation, expires_ms, token) "
              "SELECT x.shard, $2, $3, n.ms + $4, 1 FROM n, unnest($1::int4[]) AS x(shard) "
              "ORDER BY x.shard "
              "ON CONFLICT (shard) DO UPDATE SET owner = EXCLUDED.owner, "
              "incarnation = EXCLUDED.incarnation, expires_ms = EXCLUDED.expires_ms, "
              "token = CASE WHEN l.owner = EXCLUDED.owner AND l.incarnation = EXCLUDED.incarnation "
              "AND l.expires_ms > EXCLUDED.expires_ms - $4 THEN l.token ELSE l.token + 1 END "
              "WHERE l.owner IS NULL OR l.expires_ms <= EXCLUDED.expires_ms - $4 "
              "OR (l.owner = EXCLUDED.owner AND l.incarnation = EXCLUDED.incarnation) "
              "RETURNING l.shard, l.token";
    expire =
        std::string(now_cte) + "DELETE FROM " + s.members + " m USING n WHERE m.expires_ms <= n.ms";
    heartbeat = std::string(now_cte) + "INSERT INTO " + s.members +
                " (name, expires_ms) SELECT $1, n.ms + $2 FROM n "
                "ON CONFLICT (name) DO UPDATE SET expires_ms = EXCLUDED.expires_ms";
    members = std::string(now_cte) + "SELECT n.ms, m.name, m.expires_ms FROM n LEFT JOIN " +
              s.members + " m ON m.expires_ms > n.ms";
    leave = "DELETE FROM " + s.members + " WHERE name = $1";
  }
  std::string renew, release, acquire, expire, heartbeat, members, leave;
};

class pg_shard_leases final : public shard_leases {
 public:
  pg_shard_leases(const postgres_options& options, cluster_options cluster)
      : opts_(options),
        sql_(opts_.layout.schema),
        q_(sql_),
        book_(std::move(cluster)),
        name_(opts_.describe() + " leases of " + book_.options().instance),
        lease_ms_(book_.options().lease.count()),
        incarnation_(new_incarnation()),
        conn_(opts_.connection, name_, "delayq:" + opts_.layout.schema + ":leases") {}

  lease_round renew(std::span<const std::uint32_t> keep, boost::system::error_code& ec) override;
  void release_all(std::span<const std::uint32_t> keep, boost::system::error_code& ec) override;
  const cluster_options& options() const noexcept override { return book_.options(); }

 private:
  // One trip: `stmts` then the members statements, as one transaction.
  // Returns the results, the members' read last; throws pg_failure.
  std::vector<result_ptr> trip(std::vector<statement>& stmts);
  void read_members(const PGresult* r);
  void add_members(std::vector<statement>& stmts);
  void add_release(std::vector<statement>& stmts, const std::vector<std::int32_t>& shards,
                   const std::vector<std::int64_t>& tokens);

  postgres_options opts_;
  schema_sql sql_;
  lease_sql q_;
  lease_book book_;
  std::string name_;
  std::int64_t lease_ms_;
  std::string incarnation_;

  std::mutex mutex_;  // guards everything below
  connection conn_;
  clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
};

void pg_shard_leases::add_release(std::vector<statement>& stmts,
                                  const std::vector<std::int32_t>& shards,
                                  const std::vector<std::int64_t>& tokens) {
  statement& r = stmts.emplace_back();
  r.name = "dq_ll";
  r.sql = q_.release;
  r.args.int4_array(shards).int8_array(tokens).text(book_.options().instance).text(incarnation_);
}

void pg_shard_leases::add_members(std::vector<statement>& stmts) {
  statement& e = stmts.emplace_back();
  e.name = "dq_lx";
  e.sql = q_.expire;
  statement& h = stmts.emplace_back();
  h.name = "dq_lh";
  h.sql = q_.heartbeat;
  h.args.text(book_.options().instance).int8(lease_ms_);
  statement& m = stmts.emplace_back();
  m.name = "dq_lm";
  m.sql = q_.members;
}

std::vector<result_ptr> pg_shard_leases::trip(std::vector<statement>& stmts) {
  // A connection the server closed since the last round (a restart) is
  // found out before the round is sent on it.
  if (conn_.connected() && !conn_.alive()) conn_.close();
  if (!conn_.connected()) {
    if (backoff_.count() > 0 && clock::now() < retry_at_)
      throw pg_failure{errc::store_unavailable, name_ +
                                                    ": the database was unreachable moments "
                                                    "ago; not dialling again yet (backoff)"};
    try {
      conn_.connect();
      backoff_ = std::chrono::milliseconds{0};
    } catch (const pg_failure&) {
      backoff_ = backoff_.count() == 0 ? std::chrono::milliseconds{100}
                                       : std::min(backoff_ * 2, std::chrono::milliseconds{5000});
      retry_at_ = clock::now() + backoff_;
      throw;
    }
  }
  return conn_.exchange(stmts, true);
}

void pg_shard_leases::read_members(const PGresult* r) {
  const auto read_at = clock::now();
  std::vector<std::pair<std::string, std::int64_t>> members;
  std::int64_t now = 0;
  for (int i = 0; i < PQntuples(r); ++i) {
    now = get_int8(r, i, 0);
    if (is_null(r, i, 1)) continue;
    members.emplace_back(std::string(get_bytes(r, i, 1)), get_int8(r, i, 2));
  }
  book_.set_members(std::move(members), now, read_at);
}

lease_round pg_shard_leases::renew(std::span<const std::uint32_t> keep,
                                   boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  auto& held = book_.held();
  const auto before = held;
  const auto start = clock::now();
  try {
    // Trip 1: renew what we hold, heartbeat, read the members.
    std::vector<statement> stmts;
    std::vector<std::int32_t> shards;
    std::vector<std::int64_t> tokens;
    for (const auto& [s, l] : held) {
      shards.push_back(static_cast<std::int32_t>(s));
      tokens.push_back(static_cast<std::int64_t>(l.token));
    }
    if (!shards.empty()) {
      statement& r = stmts.emplace_back();
      r.name = "dq_lr";
      r.sql = q_.renew;
      r.args.int4_array(shards)
          .int8_array(tokens)
          .text(book_.options().instance)
          .text(incarnation_)
          .int8(lease_ms_);
    }
    add_members(stmts);
    auto out = trip(stmts);
    read_members(out.back().get());
    std::vector<std::uint32_t> renewed;
    if (!shards.empty())
      for (int i = 0; i < PQntuples(out[0].get()); ++i)
        renewed.push_back(static_cast<std::uint32_t>(get_int4(out[0].get(), i, 0)));
    std::sort(renewed.begin(), renewed.end());
    std::string refused;
    for (auto it = held.begin(); it != held.end();) {
      if (std::binary_search(renewed.begin(), renewed.end(), it->first)) {
        it->second.valid_until = start + book_.options().lease;
        ++it;
      } else {
        refused += (refused.empty() ? "" : " ") + std::to_string(it->first);
        it = held.erase(it);
      }
    }
    if (!refused.empty())
      log(log_level::warning,
          name_ + ": lost the leases of shards " + refused +
              ": they lapsed and another instance took them, or another process runs under the "
              "instance name '" +
              book_.options().instance + "'");

    // Trip 2: give away what another live member should own, take what we
    // should own. The leases given away count as gone from here on,
    // answered or not: we were leaving them anyway.
    stmts.clear();
    std::vector<std::int32_t> release_shards, acquire_shards;
    std::vector<std::int64_t> release_tokens;
    for (auto it = held.begin(); it != held.end();) {
      if (book_.mine(it->first) || std::binary_search(keep.begin(), keep.end(), it->first)) {
        ++it;  // ours, or the caller is not done with it (lease_round::leaving)
        continue;
      }
      release_shards.push_back(static_cast<std::int32_t>(it->first));
      release_tokens.push_back(static_cast<std::int64_t>(it->second.token));
      it = held.erase(it);
    }
    for (std::uint32_t s = 0; s < book_.options().shards; ++s)
      if (book_.mine(s) && !held.contains(s))
        acquire_shards.push_back(static_cast<std::int32_t>(s));
    if (release_shards.empty() && acquire_shards.empty()) return book_.finish(start, before, false);
    if (!release_shards.empty()) add_release(stmts, release_shards, release_tokens);
    const std::size_t acquire_at = stmts.size();
    if (!acquire_shards.empty()) {
      statement& a = stmts.emplace_back();
      a.name = "dq_la";
      a.sql = q_.acquire;
      a.args.int4_array(acquire_shards)
          .text(book_.options().instance)
          .text(incarnation_)
          .int8(lease_ms_);
    }
    add_members(stmts);
    const auto start2 = clock::now();
    out = trip(stmts);
    // The live set may have changed since trip 1; the next round acts on it.
    read_members(out.back().get());
    if (!acquire_shards.empty()) {
      const PGresult* r = out[acquire_at].get();
      for (int i = 0; i < PQntuples(r); ++i) {
        const auto s = static_cast<std::uint32_t>(get_int4(r, i, 0));
        const auto token = static_cast<std::uint64_t>(get_int8(r, i, 1));
        held[s] = shard_lease{s, token, start2 + book_.options().lease};
      }
    }
    return book_.finish(start, before, false);
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::warning, name_ + ": lease round: " + f.message);
    return book_.finish(start, before, true);
  }
}

void pg_shard_leases::release_all(std::span<const std::uint32_t> keep,
                                  boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  std::vector<std::int32_t> shards;
  std::vector<std::int64_t> tokens;
  for (const auto& [s, l] : book_.held())
    if (!std::binary_search(keep.begin(), keep.end(), s)) {
      shards.push_back(static_cast<std::int32_t>(s));
      tokens.push_back(static_cast<std::int64_t>(l.token));
    }
  book_.clear();
  std::vector<statement> stmts;
  if (!shards.empty()) add_release(stmts, shards, tokens);
  statement& l = stmts.emplace_back();
  l.name = "dq_lv";
  l.sql = q_.leave;
  l.args.text(book_.options().instance);
  try {
    trip(stmts);
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::warning, name_ + ": leaving the cluster: " + f.message);
  }
}

}  // namespace

std::unique_ptr<shard_leases> make_pg_shard_leases(const postgres_options& options,
                                                   cluster_options cluster,
                                                   boost::system::error_code& ec) {
  ec = {};
  cluster.validate(ec);
  if (ec) return nullptr;
  if (cluster.instance.empty()) cluster.instance = default_instance_name();
  return std::make_unique<pg_shard_leases>(options, std::move(cluster));
}

}  // namespace delayq::detail::pg
