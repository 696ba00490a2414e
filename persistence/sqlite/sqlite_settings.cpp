// persistence/sqlite/sqlite_settings.cpp - see sqlite_settings.hpp.
#include "sqlite_settings.hpp"

namespace delayq::detail::sqlite {

std::vector<std::pair<std::string, std::string>> settings_role::load_settings(
    boost::system::error_code& ec) {
  std::vector<std::pair<std::string, std::string>> out;
  std::lock_guard lock(b_.mutex());
  b_.guarded("load_settings", ec, [&] {
    SQLite::Statement& st = *b_.st().settings_all;
    reset_on_exit reset{st};
    while (st.executeStep())
      out.emplace_back(column_bytes(st.getColumn(0)), column_bytes(st.getColumn(1)));
  });
  if (ec) out.clear();
  return out;
}

void settings_role::save_setting(std::string_view key, std::string_view value,
                                 boost::system::error_code& ec) {
  std::lock_guard lock(b_.mutex());
  b_.guarded("save_setting", ec, [&] {
    SQLite::Statement& st = *b_.st().settings_upsert;
    reset_on_exit reset{st};
    bind_bytes(st, 1, key);
    bind_bytes(st, 2, value);
    st.exec();
  });
}

bool settings_role::erase_setting(std::string_view key, boost::system::error_code& ec) {
  bool erased = false;
  std::lock_guard lock(b_.mutex());
  b_.guarded("erase_setting", ec, [&] {
    SQLite::Statement& st = *b_.st().settings_erase;
    reset_on_exit reset{st};
    bind_bytes(st, 1, key);
    erased = st.exec() > 0;
  });
  return erased && !ec;
}

}  // namespace delayq::detail::sqlite
