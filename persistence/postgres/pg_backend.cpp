// persistence/postgres/pg_backend.cpp - see pg_backend.hpp.
#include "pg_backend.hpp"

#include <chrono>

#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "pg_rotation.hpp"

namespace delayq::detail::pg {

backend::backend(postgres_options options, int gen)
    : opts_(std::move(options)),
      name_(opts_.describe()),
      sql_(opts_.layout.schema),
      calls_(opts_.connection, name_, "delayq:" + opts_.layout.schema),
      gen_(gen) {}

backend::~backend() {
  rotation_.reset();
  writer_.reset();
}

void backend::exchange(const char* what, bool write, std::span<const statement> stmts,
                       std::vector<result_ptr>& out, boost::system::error_code& ec) {
  calls_.run(what, write, ec, [&](connection& c) { out = c.exchange(stmts, write); });
}

void backend::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  ec = {};
  if (changes.empty()) return;
  write_batch b;
  try {
    b = make_batch(sql_, shards(), gen(), changes);
  } catch (const pg_failure& f) {
    ec = make_error_code(f.code);
    log(log_level::error, name_ + ": write failed: " + f.message);
    return;
  }
  std::vector<result_ptr> results;
  // A serialization failure or a deadlock (a fence's lock against a lease
  // round) rolled the whole transaction back: run it again, a few times.
  for (int attempt = 0;; ++attempt) {
    bool conflict = false;
    calls_.run("write", true, ec, [&](connection& c) {
      try {
        results = c.exchange(b.stmts, true);
      } catch (const pg_failure& f) {
        if (attempt >= 3 || (f.sqlstate != "40001" && f.sqlstate != "40P01")) throw;
        conflict = true;
      }
    });
    if (!conflict) break;
  }
  if (ec) return;
  settle_batch(b, changes, results, ec);
  note_writes(changes.size());
}

write_pipeline& backend::writer() {
  std::lock_guard lock(writer_mutex_);
  if (!writer_)
    writer_ = std::make_unique<write_pipeline>(calls_, sql_, shards(), gen_, writer_io_);
  return *writer_;
}

void backend::drive_writes_on(boost::asio::any_io_executor io) {
  std::lock_guard lock(writer_mutex_);
  if (!writer_) writer_io_ = std::move(io);
}

void backend::note_writes(std::size_t changes) {
  std::lock_guard lock(writer_mutex_);
  if (!rotation_) rotation_ = std::make_unique<rotation>(*this);
  rotation_->note_writes(changes);
}

std::optional<task> decode_live(std::string_view id, std::string_view raw, std::string& why) {
  boost::system::error_code dec;
  task t = decode_task(raw, dec, &why);
  if (dec) return std::nullopt;
  if (t.id != id) {
    why = "record holds id '" + t.id + "'";
    return std::nullopt;
  }
  return t;
}

std::int64_t now_ms() { return to_epoch_ms(std::chrono::system_clock::now()); }

}  // namespace delayq::detail::pg
