// wire/request_codec.hpp - the JSON bodies of the API, checked and turned
// into plain structs. Pure functions with no engine and no I/O, so the fuzz
// target (tests/fuzz/fuzz_server_request.cpp) can drive every one of them.
// The routes (api/) decode with them; the lease broker (pull/) takes the
// reserve_request they produce.
//
// Every parser refuses what docs/server.md does not allow: a body that is not
// an object, a field of the wrong type, an unknown field (named, so a
// misspelt "dealy_ms" never schedules a task for now), a number out of range.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/engine.hpp"
#include "wire/api_error.hpp"

namespace delayq::server {

using std::chrono::milliseconds;

/// When a task should run: exactly one of the two is set.
struct when_spec {
  std::optional<std::int64_t> delay_ms;
  std::optional<std::int64_t> due_ms;
  /// The wall-clock instant, with the engine's errors kept: a negative delay
  /// or due time maps to an instant before the epoch (errc::invalid_delay), a
  /// due time past what the clock holds to time_point::max()
  /// (errc::due_too_far). Never overflows.
  std::chrono::system_clock::time_point due(std::chrono::system_clock::time_point now) const;
};

/// POST /v1/tasks and each task of a batch.
struct add_request {
  std::string type;
  std::string payload;
  std::string id;
  on_conflict conflict = on_conflict::reject;
  when_spec when;
  std::uint32_t trigger_count = 0;  ///< "trigger_count": 0..max_trigger_count, 0 none
  std::uint32_t priority = 0;       ///< "priority": 0..2^32 - 1, lower first (task::priority)
  milliseconds ttr{0};              ///< "ttr_ms": 0 (the consumer's) or min_ttr..max_ttr
};

/// POST /v1/reserve.
struct reserve_request {
  std::vector<std::string> types;  ///< Empty: any type.
  std::size_t max = 1;
  milliseconds wait{0};
  milliseconds ttr{30'000};
};

/// finish, fail and touch.
struct lease_request {
  std::string lease;
  std::string error;                ///< fail: why (may be empty).
  std::optional<milliseconds> ttr;  ///< touch: the new lease length.
  /// finish, fail: a reserve to run once the outcome is durable, whose
  /// tasks the answer carries (a worker's ack and next take in one call).
  std::optional<reserve_request> next;
};

/// POST /v1/tasks:finish: several finishes in one call.
struct finish_batch_request {
  struct item {
    std::string id;
    std::string lease;
  };
  std::vector<item> tasks;
  /// A reserve to run once every finish has its outcome (as finish's).
  std::optional<reserve_request> next;
};

/// PUT /v1/schedules/{id}: the body, checked for its form (types, ranges,
/// unknown fields); `out.id` is the path's. check_schedule() judges the
/// rest (the cron expression, the time zone, start and end).
std::optional<api_error> parse_schedule(const nlohmann::json& j, const std::string& id,
                                        schedule& out);

/// Limits the parsers enforce (docs/server.md).
inline constexpr std::size_t max_batch = 10'000;
inline constexpr std::size_t max_reserve = 1'000;
/// The most finishes one POST /v1/tasks:finish carries (a reserve's most
/// tasks: a worker finishes what it took).
inline constexpr std::size_t max_finish_batch = max_reserve;
/// The most task types one reserve call names: each is looked at for every
/// task it takes, under the broker's lock.
inline constexpr std::size_t max_reserve_types = 100;
/// The deepest offset GET /v1/dead pages to: a sharded store reads
/// offset + limit letters of every shard to answer it.
inline constexpr std::size_t max_dead_offset = 10'000;
/// GET /v1/schedules pages to this offset at most (a sharded store reads
/// offset + limit schedules of every shard), and GET /v1/schedules/{id}
/// lists at most this many next occurrences.
inline constexpr std::size_t max_schedule_offset = 10'000;
inline constexpr std::size_t max_next_occurrences = 1'000;
inline constexpr milliseconds max_wait{60'000};
inline constexpr milliseconds min_ttr{1'000};
inline constexpr milliseconds max_ttr{12 * 3'600'000};
inline constexpr milliseconds default_ttr{30'000};

/// Parses `body` as JSON into `out`. An empty body is an empty object when
/// `empty_is_object` (for calls whose fields are all optional).
std::optional<api_error> parse_json(std::string_view body, nlohmann::json& out,
                                    bool empty_is_object = false);

std::optional<api_error> parse_add(const nlohmann::json& j, add_request& out,
                                   const std::string& where = {});
std::optional<api_error> parse_batch(const nlohmann::json& j, std::vector<add_request>& out);
std::optional<api_error> parse_when(const nlohmann::json& j, when_spec& out);
std::optional<api_error> parse_reserve(const nlohmann::json& j, reserve_request& out);
std::optional<api_error> parse_finish(const nlohmann::json& j, lease_request& out);
std::optional<api_error> parse_fail(const nlohmann::json& j, lease_request& out);
std::optional<api_error> parse_touch(const nlohmann::json& j, lease_request& out);
/// `{"tasks": [{"id", "lease"}, ...], "next"?}`, 1..max_finish_batch tasks.
std::optional<api_error> parse_finish_batch(const nlohmann::json& j, finish_batch_request& out);
/// POST /v1/dead/{id}/requeue: `{"delay_ms"?}` (default 0).
std::optional<api_error> parse_requeue(const nlohmann::json& j, milliseconds& delay);
/// Largest "trigger_count" of a task and "n" of a signal.
inline constexpr std::uint32_t max_trigger_count = 1'000'000;
/// POST /v1/tasks/{id}/signal: `{"n"?}`, 1..max_trigger_count (default 1).
std::optional<api_error> parse_signal(const nlohmann::json& j, std::uint32_t& n);

}  // namespace delayq::server
