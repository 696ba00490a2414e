// detail::redis::tasks_role::list(): recovery, streamed on a connection of its own.
//
// HSCAN pages of {P}:tasks, pipelined one ahead: as soon as the reply for
// page k is read, the request for page k+1 (its cursor is in that reply) is
// sent, and page k is decoded and handed to the sink while the server
// gathers page k+1. Memory stays bounded by about two pages of replies,
// plus the ids already handed over: HSCAN may return an element twice
// (while the hash is rehashed), and the sink must see each task once.
// A record that does not decode is quarantined by a script sent behind the
// next page's request; its reply is read with that page.
//
// The connection is private to the call, so the sink may call back into the
// store (which uses the store's own connection) while a request is on the
// wire here.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "redis_backend.hpp"
#include "redis_tasks.hpp"

namespace delayq {

using detail::redis::backend;
namespace {

using detail::redis::command;
using detail::redis::connection;
using detail::redis::redis_failure;
using detail::redis::reply_ptr;
using detail::redis::sigpipe_guard;

// Entries per HSCAN page (a hint to the server: pages vary in size).
constexpr const char* page_hint = "1000";
// A progress line every this many tasks.
constexpr std::size_t progress_every = 250'000;

void flush(connection& conn) {
  int done = 0;
  while (!done) {
    errno = 0;
    if (redisBufferWrite(conn.get(), &done) != REDIS_OK) throw conn.lost(errno, false);
  }
}

// The ids handed to the sink so far: an exact set, compact and without an
// allocation per id (a node-based set took a third of a 1e6-task recovery).
// The id bytes go to one arena, each after a 4-byte length; the table holds
// a hash and an arena offset per id, open addressing with linear probing,
// at most half full.
class seen_ids {
 public:
  /// Sizes the set for `n` ids up front, up to a cap (HLEN may be huge; the
  /// set grows by itself past it).
  void reserve(std::size_t n) {
    n = std::min<std::size_t>(n, 1 << 22);
    arena_.reserve(n * 16);
    std::size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > table_.size()) rehash(cap);
  }

  /// The hash insert() wants for `id`; also prefetches its slot, so that a
  /// page's ids can be hashed first and inserted after, without waiting on
  /// a cache miss each (the table is far larger than the cache).
  std::uint64_t hash(std::string_view id) {
    if (2 * (size_ + page_max) > table_.size()) {
      std::size_t cap = std::max<std::size_t>(16, table_.size());
      while (cap < 2 * (size_ + page_max)) cap *= 2;
      rehash(cap);
    }
    const std::uint64_t h = std::hash<std::string_view>{}(id) | 1;  // 0 marks a free slot
    __builtin_prefetch(&table_[h & (table_.size() - 1)]);
    return h;
  }

  /// Adds `id`, whose hash() is `h`; false if it was there already. At most
  /// page_max inserts per round of hash() calls.
  bool insert(std::string_view id, std::uint64_t h) {
    const std::size_t mask = table_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      slot& s = table_[i];
      if (s.hash == 0) {
        s.hash = h;
        s.offset = arena_.size();
        const auto len = static_cast<std::uint32_t>(id.size());
        arena_.append(reinterpret_cast<const char*>(&len), sizeof len);
        arena_.append(id);
        ++size_;
        return true;
      }
      if (s.hash == h && at(s.offset) == id) return false;
    }
  }

 private:
  struct slot {
    std::uint64_t hash = 0;
    std::uint64_t offset = 0;
  };

  std::string_view at(std::uint64_t offset) const {
    std::uint32_t len = 0;
    std::memcpy(&len, arena_.data() + offset, sizeof len);
    return {arena_.data() + offset + sizeof len, len};
  }

  void rehash(std::size_t cap) {
    std::vector<slot> old(cap);
    old.swap(table_);
    const std::size_t mask = cap - 1;
    for (const slot& s : old) {
      if (s.hash == 0) continue;
      std::size_t i = s.hash & mask;
      while (table_[i].hash != 0) i = (i + 1) & mask;
      table_[i] = s;
    }
  }

  static constexpr std::size_t page_max = 1 << 16;
  std::string arena_;
  std::vector<slot> table_;
  std::size_t size_ = 0;
};

struct quarantined {
  std::string id;
  std::string why;
};

}  // namespace

list_summary detail::redis::tasks_role::list(const std::function<void(task&&)>& sink,
                                             boost::system::error_code& ec) {
  ec = {};
  backend& m = b_;
  list_summary summary;
  // A router of its own: in a cluster, the node of the store's slot.
  detail::redis::cluster_router router(m.opts, m.name,
                                       detail::redis::client_name_for(m.opts, ":list"),
                                       detail::redis::store_handshake::reader(m.opts));
  seen_ids seen;
  std::vector<std::uint64_t> hashes;  // of one page's ids
  std::vector<quarantined> pending;   // quarantine scripts whose replies are due
  const auto started = std::chrono::steady_clock::now();
  std::size_t total = 0;
  std::size_t next_progress = progress_every;

  const backend::part* p = &m.parts[0];  // the part being scanned
  const auto read_quarantined = [&](connection& conn) {
    auto replies = conn.read_replies(pending.size(), true);
    for (std::size_t k = 0; k < replies.size(); ++k) {
      const redisReply* r = replies[k].get();
      if (r->type == REDIS_REPLY_ERROR) detail::redis::throw_server_error("quarantine", r);
      if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        ++summary.quarantined;
        log(log_level::error, m.name + ": quarantined undecodable record of task '" +
                                  pending[k].id + "' in " + p->keys.quarantine + ": " +
                                  pending[k].why);
      }
    }
    pending.clear();
  };

  // Runs on the node of the store's slot. After a cluster redirect (the
  // slot moved, or is moving) the scan starts again from cursor 0 on the
  // node the router picks: HSCAN cursors belong to one node. `seen` keeps
  // the sink from getting a task twice.
  const auto scan = [&](connection& conn) {
    pending.clear();
    std::string cursor = "0";
    // Asks for the page at `cursor` without waiting for it: pages are read
    // one ahead, so the server scans while this thread decodes.
    const auto request_page = [&] {
      conn.append(
          command().arg("HSCAN").arg(p->keys.tasks).arg(cursor).arg("COUNT").arg(page_hint));
      flush(conn);
    };
    {
      sigpipe_guard guard;
      auto hlen = conn.exchange({command().arg("HLEN").arg(p->keys.tasks)});
      if (hlen[0]->type == REDIS_REPLY_INTEGER && hlen[0]->integer > 0)
        total = summary.tasks + static_cast<std::size_t>(hlen[0]->integer);  // + earlier parts
      seen.reserve(total);
      request_page();
    }
    for (;;) {
      reply_ptr page;
      {
        sigpipe_guard guard;
        page = std::move(conn.read_replies(1)[0]);
        read_quarantined(conn);
      }
      const redisReply* r = page.get();
      if (r->type == REDIS_REPLY_ERROR) detail::redis::throw_server_error("HSCAN", r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
          r->element[1]->type != REDIS_REPLY_ARRAY || r->element[1]->elements % 2 != 0)
        throw redis_failure{errc::store_error, "unexpected HSCAN reply"};
      cursor = detail::redis::reply_text(r->element[0]);
      const bool more = cursor != "0";
      const redisReply* items = r->element[1];
      hashes.clear();
      for (std::size_t i = 0; i < items->elements; i += 2)
        hashes.push_back(seen.hash({items->element[i]->str, items->element[i]->len}));
      if (more) {
        sigpipe_guard guard;
        request_page();
      }
      for (std::size_t i = 0; i < items->elements; i += 2) {
        const std::string_view id(items->element[i]->str, items->element[i]->len);
        const std::string_view raw(items->element[i + 1]->str, items->element[i + 1]->len);
        boost::system::error_code dec;
        std::string why;
        task t = decode_stored_task(id, raw, dec, &why);
        if (dec) {
          // Sent behind the next page's request; the reply comes with it.
          conn.append(detail::redis::quarantine_call(detail::redis::quarantine_script,
                                                     p->keys.tasks, p->keys.due, p->keys.quarantine,
                                                     p->keys.quarantine_reason)
                          .arg(id)
                          .arg(raw)
                          .arg(why));
          pending.push_back({std::string(id), std::move(why)});
          continue;
        }
        if (!seen.insert(id, hashes[i / 2])) continue;
        ++summary.tasks;
        sink(std::move(t));
        if (summary.tasks == next_progress) {
          next_progress += progress_every;
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
          log(log_level::info, m.name + ": recovery: " + std::to_string(summary.tasks) + " of ~" +
                                   std::to_string(total) + " tasks listed in " +
                                   std::to_string(ms) + " ms");
        }
      }
      if (!pending.empty()) {
        sigpipe_guard guard;
        flush(conn);
      }
      if (!more) break;
    }
    sigpipe_guard guard;
    read_quarantined(conn);
  };

  // Each part in turn (the shards of a sharded store; ids are unique
  // across them, so `seen` serves them all).
  for (const backend::part& part : m.parts) {
    p = &part;
    const auto failure = router.try_run(part.slot, [&](connection& conn) {
      try {
        scan(conn);
      } catch (const detail::redis::cluster_redirect&) {
        // Requests may still be on the wire (the next page, quarantines).
        conn.drop(false);
        throw;
      }
    });
    if (failure) {
      ec = make_error_code(failure->code);
      log(log_level::error, m.name + ": list failed: " + failure->message);
      break;
    }
  }
  return summary;
}

}  // namespace delayq
