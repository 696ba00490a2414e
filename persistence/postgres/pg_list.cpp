// persistence/postgres/pg_list.cpp - tasks_role::list(): the recovery read.
//
// One `COPY (SELECT id, record FROM tasks) TO STDOUT (FORMAT binary)` on a
// connection of its own: the server streams one snapshot of the table (each
// row once, whatever is written meanwhile: no duplicate check needed), and
// each row is decoded straight from libpq's buffer and handed to the sink as
// it arrives, so memory stays at a row or two whatever the table holds. A
// COPY is the fastest way out of PostgreSQL (no per-row result object, no
// cursor round trips). A record that does not decode is quarantined at once,
// on a call connection, if it still holds the bytes read. No lock of the
// store is held while the sink runs, so it may call back into the store.
#include <cstring>

#include "delayq/log.hpp"
#include "pg_tasks.hpp"

namespace delayq::detail::pg {
namespace {

// The binary COPY format: an 11-byte signature, a 4-byte flags field and a
// 4-byte header extension length (and the extension); then per row a 2-byte
// field count (-1: the trailer) and per field a 4-byte length (-1: NULL)
// and its bytes. All big-endian.
constexpr char signature[] = "PGCOPY\n\377\r\n";  // and a NUL: 11 bytes

class copy_parser {
 public:
  // Feeds one message's bytes; calls row(id, record) for each complete row.
  // Throws pg_failure on a malformed stream.
  template <class Row>
  void feed(std::string_view data, Row&& row) {
    if (!pending_.empty()) {
      pending_.append(data);
      const std::size_t used = parse(pending_, row);
      pending_.erase(0, used);
      return;
    }
    const std::size_t used = parse(data, row);
    pending_.assign(data.substr(used));
  }
  bool done() const noexcept { return trailer_; }

 private:
  template <class Row>
  std::size_t parse(std::string_view d, Row& row) {
    std::size_t at = 0;
    if (!header_) {
      if (d.size() < 19) return 0;
      if (std::memcmp(d.data(), signature, 11) != 0)
        throw pg_failure{errc::store_error, "not a binary COPY stream"};
      const std::uint32_t ext = read_be32(d.data() + 15);
      if (d.size() < 19 + static_cast<std::size_t>(ext)) return 0;
      at = 19 + ext;
      header_ = true;
    }
    while (!trailer_) {
      if (d.size() - at < 2) break;
      const auto fields = static_cast<std::int16_t>(read_be16(d.data() + at));
      if (fields == -1) {
        trailer_ = true;
        at += 2;
        break;
      }
      if (fields != 2) throw pg_failure{errc::store_error, "a COPY row without 2 fields"};
      std::size_t p = at + 2;
      std::string_view f[2];
      bool complete = true;
      for (auto& field : f) {
        if (d.size() - p < 4) {
          complete = false;
          break;
        }
        const auto len = static_cast<std::int32_t>(read_be32(d.data() + p));
        p += 4;
        if (len < 0) throw pg_failure{errc::store_error, "a NULL in a COPY row"};
        if (d.size() - p < static_cast<std::size_t>(len)) {
          complete = false;
          break;
        }
        field = d.substr(p, static_cast<std::size_t>(len));
        p += static_cast<std::size_t>(len);
      }
      if (!complete) break;
      row(f[0], f[1]);
      at = p;
    }
    return at;
  }

  std::string pending_;
  bool header_ = false;
  bool trailer_ = false;
};

}  // namespace

list_summary tasks_role::list(const std::function<void(task&&)>& sink,
                              boost::system::error_code& ec) {
  ec = {};
  list_summary summary;
  std::unique_ptr<connection> c;
  try {
    c = b_.calls().dial(":list");
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::error, f.message + " (list)");
    return {};
  }
  const auto started = std::chrono::steady_clock::now();
  constexpr std::size_t progress_every = 250'000;
  copy_parser parser;
  std::optional<boost::system::error_code> quarantine_failed;
  const auto on_row = [&](std::string_view id, std::string_view raw) {
    std::string why;
    if (auto t = decode_live(id, raw, why)) {
      ++summary.tasks;
      sink(std::move(*t));
      if (summary.tasks % progress_every == 0)
        log(log_level::info,
            b_.name() + ": list: " + std::to_string(summary.tasks) + " tasks read in " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - started)
                                   .count()) +
                " ms");
      return;
    }
    boost::system::error_code qec;
    if (!quarantine_row(id, &raw, why, qec)) {
      quarantine_failed = qec;
      return;
    }
    ++summary.quarantined;
  };
  try {
    c->copy_out(b_.sql().list, [&](std::string_view message) { parser.feed(message, on_row); });
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::error, f.message + " (list)");
    return {};
  }
  if (!parser.done()) {
    ec = errc::store_error;
    log(log_level::error, b_.name() + ": list: the COPY stream ended without its trailer");
    return {};
  }
  if (quarantine_failed) {
    ec = *quarantine_failed;
    return {};
  }
  if (summary.tasks >= progress_every)
    log(log_level::info, b_.name() + ": list: " + std::to_string(summary.tasks) + " tasks in " +
                             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::steady_clock::now() - started)
                                                .count()) +
                             " ms");
  return summary;
}

}  // namespace delayq::detail::pg
