// persistence/postgres/pg_sequences.cpp - see pg_sequences.hpp.
#include "pg_sequences.hpp"

#include <limits>

#include "delayq/log.hpp"

namespace delayq::detail::pg {

std::uint64_t sequences_role::allocate(std::string_view name, std::uint64_t count,
                                       boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, count) || count >= most) {
    ec = errc::invalid_options;
    return 0;
  }
  std::uint64_t first = 0;
  bool passed_end = false;
  b_.calls().run("allocate", true, ec, [&](connection& c) {
    statement s{"dq_sq", b_.sql().sequence_take, {}};
    s.args.bytea(name).int8(static_cast<std::int64_t>(count));
    const auto r = c.exchange(std::span{&s, 1}, true);
    if (PQntuples(r[0].get()) == 0)
      passed_end = true;
    else
      first = static_cast<std::uint64_t>(get_int8(r[0].get(), 0, 0));
  });
  if (!ec && passed_end) {
    ec = errc::invalid_options;
    log(log_level::error, b_.name() + ": sequence '" + to_text(name) + "' would pass 2^63 - 1");
  }
  return ec ? 0 : first;
}

void sequences_role::raise_to(std::string_view name, std::uint64_t next,
                              boost::system::error_code& ec) {
  ec = {};
  if (!valid_sequence_call(name, 1) ||
      next > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    ec = errc::invalid_options;
    return;
  }
  b_.calls().run("raise_to", true, ec, [&](connection& c) {
    statement s{"dq_sr", b_.sql().sequence_raise, {}};
    s.args.bytea(name).int8(static_cast<std::int64_t>(next));
    c.exchange(std::span{&s, 1}, true);
  });
}

}  // namespace delayq::detail::pg
