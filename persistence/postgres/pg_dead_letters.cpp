// persistence/postgres/pg_dead_letters.cpp - see pg_dead_letters.hpp.
#include "pg_dead_letters.hpp"

#include <cstdint>

#include "delayq/log.hpp"

namespace delayq::detail::pg {
namespace {

std::int64_t clamp_to_int64(std::size_t n) {
  return static_cast<std::int64_t>(
      std::min<std::uint64_t>(n, static_cast<std::uint64_t>(INT64_MAX)));
}

}  // namespace

// On `c`, inside a pool call: moves the letter `id` to the quarantine table
// when it still holds `raw`. Throws pg_failure.
void dead_letters_role::quarantine_row(connection& c, std::string_view id, std::string_view raw,
                                       std::string_view reason) {
  const std::string text = to_text(reason);
  statement s{"dq_qd", b_.sql().quarantine_dead, {}};
  s.args.bytea(id).text(text).int8(now_ms()).bytea(raw);
  c.exchange(std::span{&s, 1}, true);
  log(log_level::error,
      b_.name() + ": quarantined undecodable dead letter '" + std::string(id) + "': " + text);
}

std::vector<dead_letter> dead_letters_role::list_dead(std::size_t offset, std::size_t limit,
                                                      boost::system::error_code& ec) {
  ec = {};
  std::vector<dead_letter> page;
  if (limit == 0) return page;
  b_.calls().run("list_dead", false, ec, [&](connection& c) {
    for (;;) {
      page.clear();
      statement s{"dq_dpg", b_.sql().dead_page, {}};
      s.args.int8(clamp_to_int64(offset)).int8(clamp_to_int64(limit));
      const auto out = c.exchange(std::span{&s, 1}, false);
      const PGresult* r = out[0].get();
      bool moved = false;
      for (int i = 0; i < PQntuples(r); ++i) {
        const std::string_view id = get_bytes(r, i, 0);
        const std::string_view raw = get_bytes(r, i, 1);
        std::string why;
        if (auto d = decode_dead(id, raw, why)) {
          page.push_back(std::move(*d));
          continue;
        }
        quarantine_row(c, id, raw, why);
        moved = true;
      }
      // A letter moved away shifts the ranks after it: read the page again.
      if (!moved) return;
    }
  });
  if (ec) page.clear();
  return page;
}

std::optional<dead_letter> dead_letters_role::find_dead(std::string_view id,
                                                        boost::system::error_code& ec) {
  ec = {};
  std::optional<dead_letter> found;
  b_.calls().run("find_dead", false, ec, [&](connection& c) {
    statement s{"dq_dfd", b_.sql().dead_find, {}};
    s.args.bytea(id);
    const auto out = c.exchange(std::span{&s, 1}, false);
    if (PQntuples(out[0].get()) == 0) return;
    const std::string_view raw = get_bytes(out[0].get(), 0, 0);
    std::string why;
    found = decode_dead(id, raw, why);
    if (!found) quarantine_row(c, id, raw, why);
  });
  if (ec) found.reset();
  return found;
}

std::size_t dead_letters_role::count_dead(boost::system::error_code& ec) {
  ec = {};
  std::size_t n = 0;
  b_.calls().run("count_dead", false, ec, [&](connection& c) {
    statement s{"dq_dct", b_.sql().dead_count, {}};
    const auto out = c.exchange(std::span{&s, 1}, false);
    n = static_cast<std::size_t>(get_int8(out[0].get(), 0, 0));
  });
  return ec ? 0 : n;
}

}  // namespace delayq::detail::pg
