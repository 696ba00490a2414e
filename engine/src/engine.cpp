// The public engine: argument checks and the throwing forms, over
// detail::engine_core (engine/src/detail/engine_core.hpp), which holds the
// state and drives the parts. docs/design.md explains the threads and the
// order of persist, fire and remove.
#include "delayq/engine.hpp"

#include "detail/engine_core.hpp"
#include "detail/validation.hpp"

namespace delayq {

engine::engine(boost::asio::any_io_executor ex, executor_factory executors,
               std::unique_ptr<task_store> store, engine_options options) {
  if (auto ec = detail::check_options(options))
    throw boost::system::system_error(ec, "delayq::engine");
  if (!store)
    throw boost::system::system_error(
        make_error_code(errc::invalid_options),
        "delayq::engine: no store (open one with delayq::open_store)");
  core_ = std::make_shared<detail::engine_core>(std::move(ex), std::move(executors),
                                                std::move(store), std::move(options));
}

engine::engine(boost::asio::io_context& io, executor_factory executors,
               std::unique_ptr<task_store> store, engine_options options)
    : engine(io.get_executor(), std::move(executors), std::move(store), std::move(options)) {}

engine::~engine() {
  if (!core_) return;
  core_->stop(duration{0});
  core_->shutdown();
}

void engine::start() {
  boost::system::error_code ec;
  start(ec);
  detail::throw_if(ec, "delayq::engine::start");
}
void engine::start(boost::system::error_code& ec) { core_->start(ec); }

std::string engine::schedule(std::string_view type, std::string payload, duration delay,
                             const schedule_options& options) {
  boost::system::error_code ec;
  auto id = schedule(type, std::move(payload), delay, options, ec);
  detail::throw_if(ec, "delayq::engine::schedule");
  return id;
}

std::string engine::schedule(std::string_view type, std::string payload, duration delay,
                             const schedule_options& options, boost::system::error_code& ec) {
  return core_->schedule_delay(type, payload, delay, options, ec);
}

std::string engine::schedule_at(std::string_view type, std::string payload, time_point due,
                                const schedule_options& options) {
  boost::system::error_code ec;
  auto id = schedule_at(type, std::move(payload), due, options, ec);
  detail::throw_if(ec, "delayq::engine::schedule_at");
  return id;
}

std::string engine::schedule_at(std::string_view type, std::string payload, time_point due,
                                const schedule_options& options, boost::system::error_code& ec) {
  return core_->schedule_at(type, payload, due, options, ec);
}

std::vector<std::string> engine::schedule_many(std::vector<task_spec> tasks) {
  boost::system::error_code ec;
  std::size_t bad = 0;
  auto ids = core_->schedule(tasks, ec, bad);
  if (ec)
    throw boost::system::system_error(
        ec, "delayq::engine::schedule_many: task " + std::to_string(bad) + " of the batch");
  return ids;
}

std::vector<std::string> engine::schedule_many(std::vector<task_spec> tasks,
                                               boost::system::error_code& ec, std::size_t& bad) {
  return core_->schedule(tasks, ec, bad);
}

std::vector<std::string> engine::schedule_many(std::vector<task_spec> tasks,
                                               boost::system::error_code& ec) {
  std::size_t bad = 0;
  return core_->schedule(tasks, ec, bad);
}

void engine::async_schedule_erased(std::string type, std::string payload, time_point due,
                                   schedule_options options,
                                   std::unique_ptr<detail::schedule_completion> done) {
  core_->async_schedule(task_spec{std::move(type), std::move(payload), due, std::move(options)},
                        std::move(done));
}

bool engine::cancel(std::string_view id) {
  boost::system::error_code ec;
  const bool found = cancel(id, ec);
  detail::throw_if(ec, "delayq::engine::cancel");
  return found;
}
bool engine::cancel(std::string_view id, boost::system::error_code& ec) {
  return core_->cancel(id, ec);
}

bool engine::reschedule(std::string_view id, time_point due) {
  boost::system::error_code ec;
  const bool found = reschedule(id, due, ec);
  detail::throw_if(ec, "delayq::engine::reschedule");
  return found;
}
bool engine::reschedule(std::string_view id, time_point due, boost::system::error_code& ec) {
  return core_->reschedule(id, due, ec);
}

signal_result engine::signal(std::string_view id, std::uint32_t n) {
  boost::system::error_code ec;
  const signal_result r = signal(id, n, ec);
  detail::throw_if(ec, "delayq::engine::signal");
  return r;
}
signal_result engine::signal(std::string_view id, std::uint32_t n, boost::system::error_code& ec) {
  return core_->signal(id, n, ec);
}

std::vector<dead_letter> engine::dead_letters(std::size_t offset, std::size_t limit) const {
  boost::system::error_code ec;
  auto out = dead_letters(offset, limit, ec);
  detail::throw_if(ec, "delayq::engine::dead_letters");
  return out;
}
std::vector<dead_letter> engine::dead_letters(std::size_t offset, std::size_t limit,
                                              boost::system::error_code& ec) const {
  return core_->dead_letters(offset, limit, ec);
}

std::optional<dead_letter> engine::find_dead(std::string_view id,
                                             boost::system::error_code& ec) const {
  return core_->find_dead(id, ec);
}
std::optional<dead_letter> engine::find_dead(std::string_view id) const {
  boost::system::error_code ec;
  auto d = find_dead(id, ec);
  detail::throw_if(ec, "delayq::engine::find_dead");
  return d;
}

bool engine::requeue(std::string_view id, time_point due) {
  boost::system::error_code ec;
  const bool found = requeue(id, due, ec);
  detail::throw_if(ec, "delayq::engine::requeue");
  return found;
}
bool engine::requeue(std::string_view id, time_point due, boost::system::error_code& ec) {
  return core_->requeue(id, due, ec);
}

bool engine::purge(std::string_view id) {
  boost::system::error_code ec;
  const bool found = purge(id, ec);
  detail::throw_if(ec, "delayq::engine::purge");
  return found;
}
bool engine::purge(std::string_view id, boost::system::error_code& ec) {
  return core_->purge(id, ec);
}

std::optional<task> engine::find(std::string_view id) const {
  boost::system::error_code ec;
  auto t = find(id, ec);
  detail::throw_if(ec, "delayq::engine::find");
  return t;
}
std::optional<task> engine::find(std::string_view id, boost::system::error_code& ec) const {
  return core_->find(id, ec);
}
std::optional<task_status> engine::status(std::string_view id) const {
  boost::system::error_code ec;
  auto s = status(id, ec);
  detail::throw_if(ec, "delayq::engine::status");
  return s;
}
std::optional<task_status> engine::status(std::string_view id,
                                          boost::system::error_code& ec) const {
  return core_->status(id, ec);
}
std::vector<task> engine::upcoming(std::size_t limit, std::string_view type) const {
  return core_->upcoming(limit, type);
}
std::size_t engine::pending() const { return core_->pending(); }

std::size_t engine::fire_due() { return core_->fire_due(); }
std::string engine::owner_of(std::string_view id) const { return core_->owner_of(id); }
bool engine::attempt_current(const task& t) const noexcept { return core_->attempt_current(t); }
std::chrono::system_clock::time_point engine::now() const noexcept {
  return std::chrono::system_clock::time_point{std::chrono::milliseconds{core_->clock_ms()}};
}

std::vector<std::string> engine::members() const { return core_->members(); }

engine_stats engine::stats() const { return core_->stats(); }
engine_metrics engine::metrics() const { return core_->metrics(); }
bool engine::stop(duration drain) { return core_->stop(drain); }
const engine_options& engine::options() const noexcept { return core_->options(); }
std::string engine::store() const { return core_->store_description(); }
engine::executor_type engine::get_executor() const noexcept { return core_->executor(); }

}  // namespace delayq
