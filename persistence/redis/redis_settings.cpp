// The settings role of the Redis store (redis_settings.hpp).
#include "redis_settings.hpp"

#include <algorithm>

#include "connection.hpp"
#include "delayq/log.hpp"

namespace delayq::detail::redis {

std::vector<std::pair<std::string, std::string>> settings_role::load_settings(
    boost::system::error_code& ec) {
  backend& m = b_;
  std::vector<std::pair<std::string, std::string>> out;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "load_settings", ec, [&](connection& c) {
    out.clear();
    auto replies = c.exchange({command().arg("HGETALL").arg(m.keys.settings)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("HGETALL", r);
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
      throw redis_failure{errc::store_error, "unexpected HGETALL reply"};
    out.reserve(r->elements / 2);
    for (std::size_t i = 0; i < r->elements; i += 2)
      out.emplace_back(reply_text(r->element[i]), reply_text(r->element[i + 1]));
  });
  if (ec) out.clear();
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The sharded layout announces a changed setting on the notice channel, so
// every instance of a cluster rereads it (redis_listener.cpp parses
// "setting KEY"). Sent only once the change's own reply came back without
// an error or a redirect (a second exchange: on a Redis Cluster a MOVED
// reply is seen only after every reply of an exchange was read), so a
// notice never comes before what it announces. A retry after a lost
// connection may announce a change twice, which costs a reread. PUBLISH has
// no key: any node of a Redis Cluster takes it and spreads it to all. The
// notice is best effort: once the change landed the call succeeds, and a
// notice that could not be sent is logged (engines reread their settings
// every minute anyway).
struct setting_notice {
  setting_notice(const redis_options& opts, std::string_view key)
      : on(opts.shards != 0), channel(opts.prefix + ":notify"), message("setting ") {
    message += key;
  }
  void send(connection& c, const std::string& store_name) const {
    if (!on) return;
    std::string why;
    try {
      auto replies = c.exchange({command().arg("PUBLISH").arg(channel).arg(message)}, true);
      if (replies[0]->type == REDIS_REPLY_ERROR) why = reply_text(replies[0].get());
    } catch (const redis_failure& f) {
      why = f.message;  // the connection was dropped: the next call dials again
    }
    if (!why.empty())
      log(log_level::warning, store_name + ": the notice of a changed setting (" + message +
                                  ") was not sent: " + why +
                                  "; other instances see the change at their next reread");
  }
  bool on;
  std::string channel;  // the command borrows these two
  std::string message;
};

}  // namespace

void settings_role::save_setting(std::string_view key, std::string_view value,
                                 boost::system::error_code& ec) {
  backend& m = b_;
  const setting_notice notice(m.opts, key);
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "save_setting", ec, [&](connection& c) {
    auto replies =
        c.exchange({command().arg("HSET").arg(m.keys.settings).arg(key).arg(value)}, true);
    if (replies[0]->type == REDIS_REPLY_ERROR) throw_server_error("HSET", replies[0].get());
    notice.send(c, m.name);
  });
}

bool settings_role::erase_setting(std::string_view key, boost::system::error_code& ec) {
  backend& m = b_;
  const setting_notice notice(m.opts, key);
  bool erased = false;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "erase_setting", ec, [&](connection& c) {
    auto replies = c.exchange({command().arg("HDEL").arg(m.keys.settings).arg(key)}, true);
    if (replies[0]->type == REDIS_REPLY_ERROR) throw_server_error("HDEL", replies[0].get());
    if (replies[0]->type != REDIS_REPLY_INTEGER)
      throw redis_failure{errc::store_error, "unexpected HDEL reply"};
    erased = replies[0]->integer > 0;
    notice.send(c, m.name);
  });
  return erased && !ec;
}

}  // namespace delayq::detail::redis
