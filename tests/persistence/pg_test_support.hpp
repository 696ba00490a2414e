// Helpers of the tests that need PostgreSQL: the test server's URI (set by
// scripts/with-postgres.sh), a fresh schema per test, and a plain libpq
// connection for reading and writing tables behind a store's back.
#pragma once

#include <utility>

#include <doctest/doctest.h>
#include <libpq-fe.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "delayq/postgres_store.hpp"
#include "io_runner.hpp"

namespace delayq::test {

/// The test server's URI from DELAYQ_TEST_POSTGRES; fails the test when unset.
inline std::string postgres_test_uri() {
  const char* uri = std::getenv("DELAYQ_TEST_POSTGRES");
  if (!uri || !*uri)
    FAIL(
        "DELAYQ_TEST_POSTGRES is not set: run the tests through scripts/with-postgres.sh or "
        "scripts/test.sh, which start a private PostgreSQL and set it (or export "
        "DELAYQ_TEST_POSTGRES=postgres://USER:PASSWORD@127.0.0.1:PORT/DB for a server you "
        "started yourself)");
  return uri;
}

/// A schema name no other test (in this or a parallel process) uses.
inline std::string unique_schema(const std::string& tag = "t") {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
         std::to_string(rd() % 100000);
}

/// The test server's URI with `schema` (and `extra` options, "&"-joined).
inline std::string postgres_uri_for(const std::string& schema, const std::string& extra = "") {
  std::string uri = postgres_test_uri();
  uri += uri.find('?') == std::string::npos ? "?" : "&";
  uri += "schema=" + schema;
  if (!extra.empty()) uri += "&" + extra;
  return uri;
}

/// The test server's options for `schema`.
inline postgres_options postgres_test_options(const std::string& schema, std::uint32_t shards = 0,
                                              const std::string& extra = "") {
  postgres_options o = postgres_options::parse(postgres_uri_for(schema, extra));
  o.layout.shards = shards;
  return o;
}

/// A plain libpq connection to the test server.
class raw_postgres {
 public:
  raw_postgres() {
    const postgres_options o = postgres_options::parse(postgres_test_uri());
    const std::string port = std::to_string(o.connection.port);
    const char* keys[] = {"host", "port", "user", "password", "dbname", nullptr};
    const char* values[] = {o.connection.host.c_str(),     port.c_str(),
                            o.connection.user.c_str(),     o.connection.password.c_str(),
                            o.connection.database.c_str(), nullptr};
    c_ = PQconnectdbParams(keys, values, 0);
    REQUIRE(c_ != nullptr);
    REQUIRE_MESSAGE(PQstatus(c_) == CONNECTION_OK, PQerrorMessage(c_));
    PQsetNoticeProcessor(
        c_, [](void*, const char*) {}, nullptr);
  }
  ~raw_postgres() { PQfinish(c_); }
  raw_postgres(const raw_postgres&) = delete;
  raw_postgres& operator=(const raw_postgres&) = delete;

  struct result_free {
    void operator()(PGresult* r) const { PQclear(r); }
  };
  using result_ptr = std::unique_ptr<PGresult, result_free>;

  /// Runs `sql` with binary parameters (bytes, as bytea or text by the
  /// statement's casts); fails the test on an error. Results in binary.
  result_ptr run(const std::string& sql, const std::vector<std::string>& args = {}) {
    auto r = try_run(sql, args);
    const auto st = PQresultStatus(r.get());
    REQUIRE_MESSAGE((st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK),
                    sql << ": " << PQresultErrorMessage(r.get()));
    return r;
  }
  /// The same, without failing: the caller looks at the status.
  result_ptr try_run(const std::string& sql, const std::vector<std::string>& args = {}) {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (const std::string& a : args) {
      values.push_back(a.data());
      lengths.push_back(static_cast<int>(a.size()));
      formats.push_back(0);
    }
    return result_ptr(PQexecParams(c_, sql.c_str(), static_cast<int>(args.size()), nullptr,
                                   values.data(), lengths.data(), formats.data(), 1));
  }
  /// A text-mode query's first value (for counts and plans).
  std::optional<std::string> text(const std::string& sql) {
    result_ptr r(PQexec(c_, sql.c_str()));
    REQUIRE_MESSAGE(PQresultStatus(r.get()) == PGRES_TUPLES_OK,
                    sql << ": " << PQresultErrorMessage(r.get()));
    if (PQntuples(r.get()) == 0 || PQgetisnull(r.get(), 0, 0)) return std::nullopt;
    return std::string(PQgetvalue(r.get(), 0, 0));
  }
  /// Every row's first value, text mode.
  std::vector<std::string> column(const std::string& sql) {
    result_ptr r(PQexec(c_, sql.c_str()));
    REQUIRE_MESSAGE(PQresultStatus(r.get()) == PGRES_TUPLES_OK,
                    sql << ": " << PQresultErrorMessage(r.get()));
    std::vector<std::string> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) out.emplace_back(PQgetvalue(r.get(), i, 0));
    return out;
  }
  long long count(const std::string& sql) { return std::stoll(text(sql).value_or("0")); }

  void drop_schema(const std::string& schema) {
    run("DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE");
  }

  PGconn* get() { return c_; }

 private:
  PGconn* c_ = nullptr;
};

/// Bytes as a bytea literal's hex text, for text-mode parameters: '\x...'.
inline std::string bytea_hex(std::string_view bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\\x";
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out.push_back(hex[c >> 4]);
    out.push_back(hex[c & 15]);
  }
  return out;
}

/// A binary result's value as bytes.
inline std::string bytes_of(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}

}  // namespace delayq::test
