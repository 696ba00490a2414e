// persistence/sqlite/sqlite_tasks.cpp - see sqlite_tasks.hpp: the one-kind
// writes, list() (the recovery read) and quarantine(). list_due() and
// find() are in sqlite_due.cpp.
#include "sqlite_tasks.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "../roles/change_batches.hpp"

namespace delayq::detail::sqlite {

void tasks_role::save(std::span<const task> tasks, boost::system::error_code& ec) {
  b_.write(roles::task_changes(tasks, change_kind::save), ec);
}

void tasks_role::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  std::vector<task> holders;
  b_.write(roles::id_changes(ids, change_kind::remove, holders), ec);
}

list_summary tasks_role::list(const std::function<void(task&&)>& sink,
                              boost::system::error_code& ec) {
  ec = {};
  list_summary summary;
  // One SELECT on a read connection of its own: in WAL mode it reads one
  // snapshot while this store's connection keeps writing (a sink may call
  // back into the store), and it holds one row at a time, so memory stays
  // bounded whatever the table holds. Statements are declared after the
  // connection so they are finalized first.
  std::optional<SQLite::Database> reader;
  std::optional<SQLite::Statement> rows;
  b_.guarded("list", ec, [&] {
    const auto busy_ms = b_.options().busy_timeout.count();
    reader.emplace(b_.path(), SQLite::OPEN_READONLY,
                   static_cast<int>(std::clamp<decltype(busy_ms)>(busy_ms, 0, INT_MAX)));
    rows.emplace(*reader, "SELECT rowid, id, record FROM tasks");
  });
  if (ec) return summary;

  const std::size_t every = b_.options().list_progress_every;
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t read = 0;
  auto seconds = [&] {
    return std::to_string(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  while (true) {
    bool have = false;
    std::optional<task> good;
    b_.guarded("list", ec, [&] {
      have = rows->executeStep();
      if (!have) return;
      ++read;
      const SQLite::Column rec = rows->getColumn(2);
      const void* p = rec.getBlob();
      const std::string_view raw(static_cast<const char*>(p),
                                 p ? static_cast<std::size_t>(rec.getBytes()) : 0);
      const SQLite::Column id_col = rows->getColumn(1);
      const char* id_text = id_col.getText();
      const std::string_view id(id_text, static_cast<std::size_t>(id_col.getBytes()));
      boost::system::error_code dec;
      std::string why;
      task t = decode_stored_task(id, raw, dec, &why);
      if (!dec) {
        good.emplace(std::move(t));
        return;
      }
      // Moved at once, before any later task reaches the sink, on the
      // store's own connection (the reader's snapshot is unaffected).
      const std::string owned_id(id);
      std::lock_guard lock(b_.mutex());
      b_.quarantine(*b_.st().to_quarantine, *b_.st().erase_rowid,
                    {{rows->getColumn(0).getInt64(), owned_id, std::move(why)}}, "record of task");
      ++summary.quarantined;
    });
    if (ec || !have) break;
    if (every != 0 && read % every == 0)
      log(log_level::info,
          b_.name() + ": list: " + std::to_string(read) + " records read in " + seconds() + " s");
    if (good) {
      ++summary.tasks;
      sink(std::move(*good));
    }
  }
  if (!ec && every != 0 && read >= every)
    log(log_level::info, b_.name() + ": list: done, " + std::to_string(summary.tasks) +
                             " tasks and " + std::to_string(summary.quarantined) +
                             " quarantined in " + seconds() + " s");
  return summary;
}

void tasks_role::quarantine(std::string_view id, std::string_view reason,
                            boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(b_.mutex());
  b_.guarded("quarantine", ec, [&] {
    SQLite::Transaction tx(b_.db(), SQLite::TransactionBehavior::IMMEDIATE);
    const std::string key(id);
    int copied = 0;
    {
      SQLite::Statement& st = *b_.st().quarantine_by_id;
      reset_on_exit reset{st};
      st.bind(1, key);
      st.bind(2, std::string(reason));
      st.bind(3, now_epoch_ms());
      copied = st.exec();
    }
    if (copied == 0) return;  // nothing stored under `id`: the tx rolls back, empty
    backend::exec_with_id(*b_.st().erase, key);
    tx.commit();
    log(log_level::error, b_.name() + ": quarantined task '" + key + "': " + std::string(reason));
  });
}

}  // namespace delayq::detail::sqlite
