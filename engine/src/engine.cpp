// The public engine: argument checks and the throwing forms, over
// detail::engine_core (engine/src/detail/engine_core.hpp), which holds the
// state and drives the parts. docs/design.md explains the threads and the
// order of persist, fire and remove.
#include "delayq/engine.hpp"

#include "delayq/shard_leases.hpp"
#include "detail/engine_core.hpp"
#include "detail/schedules/schedule_keeper.hpp"
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
  detail::schedules::keeper_options k;
  k.lookahead = options.schedule_lookahead;
  if (options.cluster) {
    k.lookahead = std::max(k.lookahead, 2 * options.cluster->lease + std::chrono::seconds(1));
    k.instance =
        options.cluster->instance.empty() ? default_instance_name() : options.cluster->instance;
  }
  k.max_payload = options.max_payload;
  k.type_known = [types = std::make_shared<executor_factory>(executors),
                  any = options.accept_unregistered_types](std::string_view type) {
    return any || types->contains(type);
  };
  task_store& kept = *store;
  core_ = std::make_shared<detail::engine_core>(std::move(ex), std::move(executors),
                                                std::move(store), std::move(options));
  keeper_ = std::make_unique<detail::schedules::schedule_keeper>(*this, kept, std::move(k));
}

engine::engine(boost::asio::io_context& io, executor_factory executors,
               std::unique_ptr<task_store> store, engine_options options)
    : engine(io.get_executor(), std::move(executors), std::move(store), std::move(options)) {}

engine::~engine() { close(); }

void engine::close() {
  if (!core_) return;
  if (keeper_) keeper_->stop();
  core_->stop(duration{0});
  core_->shutdown();
}

void engine::start() {
  boost::system::error_code ec;
  start(ec);
  detail::throw_if(ec, "delayq::engine::start");
}
void engine::start(boost::system::error_code& ec) {
  core_->start(ec);
  if (ec) return;
  // The schedules are read after the tasks: an occurrence made before a
  // restart is held by then, and making it again keeps it.
  keeper_->start(ec);
  if (ec) core_->stop(duration{0});
}

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

engine_stats engine::stats() const {
  engine_stats s = core_->stats();
  keeper_->add_stats(s);
  return s;
}
engine_metrics engine::metrics() const { return core_->metrics(); }
bool engine::stop(duration drain) {
  keeper_->stop();
  return core_->stop(drain);
}
const engine_options& engine::options() const noexcept { return core_->options(); }
std::string engine::store() const { return core_->store_description(); }
engine::executor_type engine::get_executor() const noexcept { return core_->executor(); }

// ---- recurring schedules ----------------------------------------------------

bool engine::upsert_schedule(const delayq::schedule& s) {
  boost::system::error_code ec;
  const bool created = upsert_schedule(s, ec);
  if (ec == errc::invalid_schedule) {
    const auto problem = check_schedule(s);
    throw boost::system::system_error(
        ec, "delayq::engine::upsert_schedule: " +
                (problem ? problem->field + ": " + problem->reason : std::string("invalid")));
  }
  detail::throw_if(ec, "delayq::engine::upsert_schedule");
  return created;
}
bool engine::upsert_schedule(const delayq::schedule& s, boost::system::error_code& ec) {
  return keeper_->upsert(s, ec);
}

bool engine::remove_schedule(std::string_view id) {
  boost::system::error_code ec;
  const bool found = remove_schedule(id, ec);
  detail::throw_if(ec, "delayq::engine::remove_schedule");
  return found;
}
bool engine::remove_schedule(std::string_view id, boost::system::error_code& ec) {
  return keeper_->remove(id, ec);
}

std::optional<delayq::schedule> engine::find_schedule(std::string_view id) const {
  boost::system::error_code ec;
  auto s = find_schedule(id, ec);
  detail::throw_if(ec, "delayq::engine::find_schedule");
  return s;
}
std::optional<delayq::schedule> engine::find_schedule(std::string_view id,
                                                      boost::system::error_code& ec) const {
  return keeper_->find(id, ec);
}

std::vector<delayq::schedule> engine::list_schedules(std::size_t offset, std::size_t limit) const {
  boost::system::error_code ec;
  auto out = list_schedules(offset, limit, ec);
  detail::throw_if(ec, "delayq::engine::list_schedules");
  return out;
}
std::vector<delayq::schedule> engine::list_schedules(std::size_t offset, std::size_t limit,
                                                     boost::system::error_code& ec) const {
  return keeper_->list(offset, limit, ec);
}

std::size_t engine::count_schedules() const {
  boost::system::error_code ec;
  const std::size_t n = count_schedules(ec);
  detail::throw_if(ec, "delayq::engine::count_schedules");
  return n;
}
std::size_t engine::count_schedules(boost::system::error_code& ec) const {
  return keeper_->count(ec);
}

std::vector<engine::time_point> engine::next_occurrences(std::string_view id, std::size_t n) const {
  boost::system::error_code ec;
  auto out = next_occurrences(id, n, ec);
  detail::throw_if(ec, "delayq::engine::next_occurrences");
  return out;
}
std::vector<engine::time_point> engine::next_occurrences(std::string_view id, std::size_t n,
                                                         boost::system::error_code& ec) const {
  return keeper_->next(id, n, ec);
}

}  // namespace delayq
