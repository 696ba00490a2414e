// persistence/postgres/postgres_store.cpp - open_postgres_store(): the
// backend, the layout check, and the role objects put together
// (delayq/postgres_store.hpp, delayq/role_store.hpp).
#include "delayq/postgres_store.hpp"

#include "delayq/role_store.hpp"
#include "pg_backend.hpp"
#include "pg_dead_letters.hpp"
#include "pg_schedules.hpp"
#include "pg_schema.hpp"
#include "pg_sequences.hpp"
#include "pg_settings.hpp"
#include "pg_shards.hpp"
#include "pg_tasks.hpp"

namespace delayq {
namespace {

using detail::pg::pg_failure;

// Runs `body` on a connection of its own, dialled now; a failure becomes
// `ec` and `message`.
template <class Body>
void with_connection(const postgres_options& options, boost::system::error_code& ec,
                     std::string* message, Body&& body) {
  ec = {};
  try {
    detail::pg::connection c(options.connection, options.describe(),
                             "delayq:" + options.layout.schema);
    c.connect();
    body(c);
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    if (message) *message = f.message;
  }
}

}  // namespace

std::unique_ptr<task_store> open_postgres_store(const postgres_options& options,
                                                boost::system::error_code& ec,
                                                std::string* message) {
  postgres_layout_state state;
  const detail::pg::schema_sql sql(options.layout.schema);
  if (!detail::pg::valid_schema_name(options.layout.schema)) {
    ec = errc::invalid_store_uri;
    if (message) *message = "invalid schema name";
    return nullptr;
  }
  int gen = 0;
  with_connection(options, ec, message, [&](detail::pg::connection& c) {
    state = detail::pg::ensure_schema(c, sql, options.layout.shards);
    gen = detail::pg::read_gen(c, sql);
  });
  if (ec) return nullptr;
  if (state.shards != options.layout.shards) {
    ec = errc::shard_mismatch;
    if (message)
      *message = "schema " + options.layout.schema + " records " + std::to_string(state.shards) +
                 " shards, not the " + std::to_string(options.layout.shards) + " asked for";
    return nullptr;
  }
  auto b = std::make_shared<detail::pg::backend>(options, gen);
  store_roles roles;
  roles.backend = b;
  auto tasks = std::make_unique<detail::pg::tasks_role>(*b);
  detail::pg::tasks_role& tasks_ref = *tasks;
  roles.tasks = std::move(tasks);
  roles.dead_letters = std::make_unique<detail::pg::dead_letters_role>(*b);
  roles.settings = std::make_unique<detail::pg::settings_role>(*b);
  roles.sequences = std::make_unique<detail::pg::sequences_role>(*b);
  roles.schedules = std::make_unique<detail::pg::schedules_role>(*b);
  if (options.layout.shards != 0)
    roles.shards = std::make_unique<detail::pg::shards_role>(*b, tasks_ref);
  return std::make_unique<role_store>(std::move(roles));
}

std::unique_ptr<task_store> open_postgres_store(const postgres_options& options) {
  boost::system::error_code ec;
  std::string why;
  auto store = open_postgres_store(options, ec, &why);
  if (ec) throw boost::system::system_error(ec, "delayq: " + options.describe() + ": " + why);
  return store;
}

postgres_layout_state inspect_postgres_layout(const postgres_options& options,
                                              boost::system::error_code& ec, std::string* message) {
  postgres_layout_state state;
  const detail::pg::schema_sql sql(options.layout.schema);
  with_connection(options, ec, message,
                  [&](detail::pg::connection& c) { state = detail::pg::read_layout(c, sql); });
  return ec ? postgres_layout_state{} : state;
}

postgres_layout_state claim_postgres_shards(const postgres_options& options, bool only_if_empty,
                                            boost::system::error_code& ec, std::string* message) {
  if (options.layout.shards == 0 || options.layout.shards > 16384) {
    ec = errc::invalid_cluster_options;
    if (message) *message = "a shard count must be from 1 to 16384";
    return {};
  }
  postgres_layout_state state;
  const detail::pg::schema_sql sql(options.layout.schema);
  with_connection(options, ec, message, [&](detail::pg::connection& c) {
    state = detail::pg::claim_shards(c, sql, options.layout.shards, only_if_empty);
  });
  return ec ? postgres_layout_state{} : state;
}

std::size_t migrate_postgres_shards(const postgres_options& options, boost::system::error_code& ec,
                                    std::string* message) {
  if (options.layout.shards == 0 || options.layout.shards > 16384) {
    ec = errc::invalid_cluster_options;
    if (message) *message = "a shard count must be from 1 to 16384";
    return 0;
  }
  std::size_t moved = 0;
  const detail::pg::schema_sql sql(options.layout.schema);
  with_connection(options, ec, message, [&](detail::pg::connection& c) {
    moved = detail::pg::migrate_shards(c, sql, options.layout.shards);
  });
  return ec ? 0 : moved;
}

}  // namespace delayq
