// beanstalk/job_names.hpp - the numeric job ids beanstalk clients see, and
// the delayq task ids behind them.
//
// A job put over beanstalk is the task whose id is its number in decimal
// ("17"), so the same job is named the same way over HTTP, in delayqctl and
// on the dashboard. A task whose id is a canonical decimal number below
// 2^63 (no sign, no leading zero) is that job, whoever put it. Any other
// task (an HTTP task with a string id, "order-42") is shown to beanstalk
// clients under an alias: 2^63 plus a 63-bit hash of its id. The alias is
// the same on every instance and after a restart, and a command naming it
// works on an instance that has shown the task before (reserve, peek, kick):
// only the hash is sent, so the id is looked up in the aliases shown here.
// Two ids whose hashes collide (about one chance in 2^32 among 2^16
// aliased tasks) share an alias; the later one shown wins it.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace delayq::server::beanstalk {

/// Thread safety: every member is safe from any thread.
class job_names {
 public:
  /// Aliases kept at most (the oldest shown is forgotten first).
  explicit job_names(std::size_t max_aliases = std::size_t{1} << 20);

  /// The job id beanstalk clients see for task `id`; remembers an alias.
  std::uint64_t number_of(std::string_view id);

  /// The task id behind job `n`; nullopt for 0 and for an alias not shown
  /// here (NOT_FOUND to the client).
  std::optional<std::string> id_of(std::uint64_t n) const;

  /// The number a task id is by itself (a canonical decimal below 2^63).
  static std::optional<std::uint64_t> numeric(std::string_view id);

  static constexpr std::uint64_t alias_bit = std::uint64_t{1} << 63;

 private:
  mutable std::mutex mutex_;
  std::size_t max_aliases_;
  std::unordered_map<std::uint64_t, std::string> aliases_;
  std::deque<std::uint64_t> order_;  // shown order, for forgetting
};

}  // namespace delayq::server::beanstalk
