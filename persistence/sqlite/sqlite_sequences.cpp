// persistence/sqlite/sqlite_sequences.cpp - see sqlite_sequences.hpp.
#include "sqlite_sequences.hpp"

#include <limits>

namespace delayq::detail::sqlite {

std::uint64_t sequences_role::allocate(std::string_view name, std::uint64_t count,
                                       boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, count) || count >= most) {
    ec = errc::invalid_options;
    return 0;
  }
  std::uint64_t first = 0;
  std::lock_guard lock(b_.mutex());
  b_.guarded("allocate", ec, [&] {
    SQLite::Statement& st = *b_.st().sequence_take;
    reset_on_exit reset{st};
    bind_bytes(st, 1, name);
    st.bind(2, static_cast<std::int64_t>(count));
    if (!st.executeStep())
      throw store_failure{errc::invalid_options,
                          "sequence '" + std::string(name) + "' would pass 2^63 - 1"};
    first = static_cast<std::uint64_t>(st.getColumn(0).getInt64());
  });
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
  std::lock_guard lock(b_.mutex());
  b_.guarded("raise_to", ec, [&] {
    SQLite::Statement& st = *b_.st().sequence_raise;
    reset_on_exit reset{st};
    bind_bytes(st, 1, name);
    st.bind(2, static_cast<std::int64_t>(next));
    st.exec();
  });
}

}  // namespace delayq::detail::sqlite
