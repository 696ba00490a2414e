// A plain libpq connection for the PostgreSQL benchmarks: what they read
// and change beside the store (sizes, statistics, a raw COPY, a long
// transaction, the schema's VACUUM and DROP).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <libpq-fe.h>

#include "delayq/postgres_store.hpp"

namespace delayq_bench {

/// Connects to the server of `o`; exits the program (status 1) when it
/// cannot. Notices are dropped.
inline PGconn* pg_connect(const delayq::postgres_options& o, const char* program) {
  const std::string port = std::to_string(o.connection.port);
  const char* keys[] = {"host", "port", "user", "password", "dbname", nullptr};
  const char* values[] = {o.connection.host.c_str(),     port.c_str(),
                          o.connection.user.c_str(),     o.connection.password.c_str(),
                          o.connection.database.c_str(), nullptr};
  PGconn* c = PQconnectdbParams(keys, values, 0);
  if (PQstatus(c) != CONNECTION_OK) {
    std::fprintf(stderr, "%s: %s", program, PQerrorMessage(c));
    std::exit(1);
  }
  PQsetNoticeProcessor(
      c, [](void*, const char*) {}, nullptr);
  return c;
}

/// Runs `sql`; exits the program (status 1) on an error.
inline void pg_exec(PGconn* c, const std::string& sql, const char* program) {
  PGresult* r = PQexec(c, sql.c_str());
  const auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::fprintf(stderr, "%s: %s: %s", program, sql.c_str(), PQresultErrorMessage(r));
    std::exit(1);
  }
  PQclear(r);
}

}  // namespace delayq_bench
