// persistence/postgres/pg_settings.cpp - see pg_settings.hpp.
#include "pg_settings.hpp"

namespace delayq::detail::pg {

std::vector<std::pair<std::string, std::string>> settings_role::load_settings(
    boost::system::error_code& ec) {
  ec = {};
  std::vector<std::pair<std::string, std::string>> out;
  b_.calls().run("load_settings", false, ec, [&](connection& c) {
    out.clear();
    statement s{"dq_sa", b_.sql().settings_all, {}};
    const auto r = c.exchange(std::span{&s, 1}, false);
    for (int i = 0; i < PQntuples(r[0].get()); ++i)
      out.emplace_back(get_bytes(r[0].get(), i, 0), get_bytes(r[0].get(), i, 1));
  });
  if (ec) out.clear();
  return out;
}

void settings_role::save_setting(std::string_view key, std::string_view value,
                                 boost::system::error_code& ec) {
  ec = {};
  const std::string notice = setting_notice_line(key);
  b_.calls().run("save_setting", true, ec, [&](connection& c) {
    statement s[2];
    s[0] = {"dq_su", b_.sql().settings_upsert, {}};
    s[0].args.bytea(key).bytea(value);
    s[1].sql = "SELECT pg_notify($1, $2)";
    s[1].args.text(b_.sql().channel).text(notice);
    c.exchange(std::span{s, b_.shards() == 0 ? 1u : 2u}, true);
  });
}

bool settings_role::erase_setting(std::string_view key, boost::system::error_code& ec) {
  ec = {};
  bool erased = false;
  const std::string notice = setting_notice_line(key);
  b_.calls().run("erase_setting", true, ec, [&](connection& c) {
    statement s[2];
    s[0] = {"dq_se", b_.sql().settings_erase, {}};
    s[0].args.bytea(key);
    s[1].sql = "SELECT pg_notify($1, $2)";
    s[1].args.text(b_.sql().channel).text(notice);
    const auto r = c.exchange(std::span{s, b_.shards() == 0 ? 1u : 2u}, true);
    erased = PQntuples(r[0].get()) > 0;
  });
  return !ec && erased;
}

}  // namespace delayq::detail::pg
