// redis_store: the backend the roles share (redis_backend.hpp) and the
// store put together from its roles (delayq/role_store.hpp). Writes go
// through the write script (scripts.hpp): write() on the store's
// connection, async_write() through the pipeline (write_pipeline.hpp).
// Each role is a file of its own: redis_tasks.cpp (with redis_list.cpp and
// redis_due.cpp), redis_dead_letters.cpp, redis_settings.cpp,
// redis_sequences.cpp, redis_schedules.cpp, redis_shards.cpp (with
// redis_listener.cpp).
#include "delayq/redis_store.hpp"

#include <mutex>
#include <optional>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/redis_shard_leases.hpp"
#include "redis_backend.hpp"
#include "redis_dead_letters.hpp"
#include "redis_schedules.hpp"
#include "redis_sequences.hpp"
#include "redis_settings.hpp"
#include "redis_shards.hpp"
#include "redis_tasks.hpp"
#include "scripts.hpp"
#include "write_pipeline.hpp"

namespace delayq {
namespace detail::redis {

backend::backend(redis_options o)
    : opts(std::move(o)),
      name(opts.describe()),
      keys(opts.prefix),
      slot(detail::redis::key_slot(keys.tasks)),
      conn(opts, name, detail::redis::client_name_for(opts, ""),
           detail::redis::store_handshake::writer(opts)),
      shard_writes(opts, name, detail::redis::client_name_for(opts, ":writer"),
                   detail::redis::store_handshake::writer(opts)) {
  if (opts.shards == 0) {
    parts.push_back({keys, slot, {}});
    return;
  }
  parts.reserve(opts.shards);
  for (std::uint32_t s = 0; s < opts.shards; ++s) {
    detail::redis::store_keys k(opts.prefix, s);
    const unsigned k_slot = detail::redis::key_slot(k.tasks);
    parts.push_back(
        {std::move(k), k_slot, {s, redis_lease_key(opts.prefix, s), opts.prefix + ":notify"}});
  }
}

backend::~backend() = default;

// Sends one batch as EVALSHA (EVAL when the server lost the script) and
// checks the reply. Runs inside conn.run(), under the mutex.
void backend::send(detail::redis::connection& c, const detail::redis::write_batch& batch) {
  for (const bool eval : {false, true}) {
    c.append_formatted(eval ? batch.eval_head() : batch.head(detail::redis::write_sha(c)));
    c.append_formatted(batch.tail(), false);
    auto replies = c.read_replies(1, true);
    const redisReply* r = replies[0].get();
    if (!eval && detail::redis::is_noscript(r)) {
      log(log_level::warning, name + ": the server lost the write script (NOSCRIPT); using EVAL");
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("write", r);
    return;
  }
}

std::size_t backend::quarantine(detail::redis::connection& c, const std::string& hash,
                                const std::string& index, const std::string& q,
                                const std::string& q_reason, const std::vector<bad_record>& bad,
                                const char* kind) {
  if (bad.empty()) return 0;
  std::vector<command> cmds;
  cmds.reserve(bad.size());
  for (const bad_record& b : bad)
    cmds.push_back(std::move(
        detail::redis::quarantine_call(detail::redis::quarantine_script, hash, index, q, q_reason)
            .arg(b.id)
            .arg(b.raw)
            .arg(b.why)));
  auto moved = c.exchange(cmds);
  std::size_t n = 0;
  for (std::size_t k = 0; k < bad.size(); ++k) {
    const redisReply* r = moved[k].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("quarantine", r);
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
      ++n;
      log(log_level::error, name + ": quarantined undecodable " + kind + " '" +
                                std::string(bad[k].id) + "' in " + q + ": " + bad[k].why);
    }
  }
  return n;
}

void backend::connect() {
  // Dials the node of the store's slot; in a cluster, checks the key layout
  // there (the handshake does it without one).
  if (auto f = conn.try_run(slot, [&](detail::redis::connection& c) {
        if (opts.cluster) detail::redis::check_store_layout(c, opts);
      }))
    throw *f;
}

detail::redis::write_pipeline& backend::writer() {
  std::lock_guard lock(pipeline_mutex);
  if (!pipeline)
    pipeline = std::make_unique<detail::redis::write_pipeline>(opts, name, slot, pipeline_io);
  return *pipeline;
}

void backend::drive_writes_on(boost::asio::any_io_executor io) {
  std::lock_guard lock(pipeline_mutex);
  if (!pipeline) pipeline_io = std::move(io);
}

// ---- writes ---------------------------------------------------------------

void backend::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  ec = {};
  if (changes.empty()) return;
  backend& m = *this;
  if (m.shards() != 0) return m.write_sharded(changes, ec);
  // Encoded once, outside the lock and the retry.
  const detail::redis::write_batch batch(m.keys, changes);
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "write", ec, [&](detail::redis::connection& c) { m.send(c, batch); });
}

void backend::async_write(std::span<const store_change> changes,
                          std::function<void(boost::system::error_code)> done) {
  backend& m = *this;
  if (m.shards() != 0) {
    // One batch may span several slots, and the pipeline writes one slot.
    boost::system::error_code ec;
    write(changes, ec);
    done(ec);
    return;
  }
  auto batch = std::make_unique<detail::redis::write_batch>(m.keys, changes);
  m.writer().submit(std::move(batch), std::move(done));
}

std::size_t backend::max_writes_in_flight() const noexcept {
  return shards() != 0 ? 1 : redis_store::writes_in_flight;
}

}  // namespace detail::redis

namespace {

using detail::redis::backend;
using detail::redis::redis_failure;

// Every role the store offers, each over the one backend; the shards role
// only in the sharded layout.
store_roles make_roles(const std::shared_ptr<backend>& b) {
  store_roles roles;
  roles.backend = b;
  roles.tasks = std::make_unique<detail::redis::tasks_role>(*b);
  roles.dead_letters = std::make_unique<detail::redis::dead_letters_role>(*b);
  roles.settings = std::make_unique<detail::redis::settings_role>(*b);
  roles.sequences = std::make_unique<detail::redis::sequences_role>(*b);
  roles.schedules = std::make_unique<detail::redis::schedules_role>(*b);
  if (b->opts.shards != 0) roles.shards = std::make_unique<detail::redis::shards_role>(*b);
  return roles;
}

// A backend connected to the node of the store's slot (and, in a cluster,
// its key layout checked), or null with `ec` and `message` set.
std::shared_ptr<backend> connect_backend(redis_options options, boost::system::error_code& ec,
                                         std::string& message) {
  ec = {};
  auto b = std::make_shared<backend>(std::move(options));
  detail::redis::sigpipe_guard guard;
  try {
    b->connect();
  } catch (const redis_failure& f) {
    ec = make_error_code(f.code);
    message = f.message;
    return nullptr;
  }
  return b;
}

std::shared_ptr<backend> connect_or_throw(redis_options options) {
  const std::string name = options.describe();
  boost::system::error_code ec;
  std::string message;
  auto b = connect_backend(std::move(options), ec, message);
  if (ec) throw boost::system::system_error(ec, "delayq: " + name + ": " + message);
  return b;
}

}  // namespace

redis_store::redis_store(std::shared_ptr<backend> b)
    : role_store(make_roles(b)), backend_(b.get()) {}

redis_store::redis_store(redis_options options)
    : redis_store(connect_or_throw(std::move(options))) {}

std::unique_ptr<redis_store> redis_store::open(redis_options options, boost::system::error_code& ec,
                                               std::string* message) {
  std::string why;
  auto b = connect_backend(std::move(options), ec, why);
  if (ec) {
    if (message) *message = std::move(why);
    return nullptr;
  }
  return std::unique_ptr<redis_store>(new redis_store(std::move(b)));
}

redis_store::~redis_store() = default;

const redis_options& redis_store::options() const noexcept { return backend_->opts; }

}  // namespace delayq
