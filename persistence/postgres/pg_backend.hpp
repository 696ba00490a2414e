// persistence/postgres/pg_backend.hpp - what the PostgreSQL store's role
// objects share: the options, the SQL of the schema, the pool of call
// connections, the write pipeline, the rotation of the live tasks'
// generations, and the helpers every role uses. Internal.
//
// The roles (pg_tasks.hpp, pg_dead_letters.hpp, pg_settings.hpp,
// pg_sequences.hpp, pg_shards.hpp) each hold a reference to one backend;
// role_store (delayq/role_store.hpp) owns them and the backend, and
// destroys the backend last.
#pragma once

#include <utility>

#include <atomic>
#include <boost/system/error_code.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "../roles/dead_record.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/task_store.hpp"
#include "pg_batch.hpp"
#include "pg_pool.hpp"
#include "pg_schema.hpp"
#include "pg_writer.hpp"

namespace delayq::detail::pg {

class rotation;

/// Thread safety: every member may be called from any thread.
class backend {
 public:
  /// `gen`: the generation new live rows go to, as the schema records it.
  backend(postgres_options options, int gen);
  ~backend();
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;

  const postgres_options& options() const noexcept { return opts_; }
  std::uint32_t shards() const noexcept { return opts_.layout.shards; }
  const std::string& name() const noexcept { return name_; }
  const schema_sql& sql() const noexcept { return sql_; }
  pool& calls() noexcept { return calls_; }

  /// One batch as one transaction on a call connection (pg_batch.hpp).
  /// Errors: see postgres_store.hpp; errc::lease_lost with the refused
  /// changes marked.
  void write(std::span<const store_change> changes, boost::system::error_code& ec);
  /// The pipeline of async_write(), started on first use: on `io` when
  /// drive_writes_on() named one before (task_store::drive_writes_on()).
  write_pipeline& writer();
  void drive_writes_on(boost::asio::any_io_executor io);
  /// The generation new live rows go to (pg_rotation.hpp): 0 or 1. A write
  /// that used an older value is still right: its rows go to the other
  /// generation, which the rotation drains.
  int gen() const noexcept { return gen_.load(std::memory_order_relaxed); }
  const std::atomic<int>& gen_ref() const noexcept { return gen_; }
  void set_gen(int g) noexcept { gen_.store(g, std::memory_order_relaxed); }
  /// Notes writes to the live tasks for the generation rotation
  /// (pg_rotation.hpp), which this starts on first use.
  void note_writes(std::size_t changes);

  /// Runs one exchange on a call connection; results to `out`. A read
  /// (`write` false) that found its connection broken runs once more.
  void exchange(const char* what, bool write, std::span<const statement> stmts,
                std::vector<result_ptr>& out, boost::system::error_code& ec);

 private:
  postgres_options opts_;
  std::string name_;
  schema_sql sql_;
  pool calls_;
  std::atomic<int> gen_;
  std::mutex writer_mutex_;
  // Declared after the pool it dials through: destroyed first, draining.
  std::unique_ptr<write_pipeline> writer_;
  boost::asio::any_io_executor writer_io_;
  std::unique_ptr<rotation> rotation_;
};

/// Decodes a live record read under `id`: a record filed under another id is
/// as corrupt as one that does not decode. Empty with `why` set on failure.
std::optional<task> decode_live(std::string_view id, std::string_view raw, std::string& why);
/// The same for a dead letter (shared by every backend).
using roles::decode_dead;

/// Milliseconds since the epoch, now.
std::int64_t now_ms();

}  // namespace delayq::detail::pg
