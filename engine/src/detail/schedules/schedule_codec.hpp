// How the engine writes a schedule into a schedule_store: its definition
// (what and when) and its state (how far its occurrences were made tasks),
// each as versioned bytes the store keeps as they are. Internal.
//
// definition, version 1, little-endian:
//   u8 1 | str type | str payload | str cron | str timezone | i64 every_ms
//   | u8 has_start | i64 start_ms | u8 has_end | i64 end_ms | u8 missed
//   | u32 priority | u32 ttr_ms | u8 conflict
// (str: u32 length, then the bytes). state, version 1:
//   u8 1 | i64 cursor_ms | i64 doubt_ms | i64 updated_ms | u64 claimant
// A newer version, or bytes that do not parse, are refused (the schedule is
// skipped with an error in the log, never rewritten).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "delayq/schedule.hpp"

namespace delayq::detail::schedules {

/// How far a schedule's occurrences were made tasks (docs/schedules.md,
/// "One task per occurrence"). Thread safety: a plain value.
struct schedule_state {
  /// Every occurrence before this instant (ms) was claimed: made a task, or
  /// handed to the engine to be made one.
  std::int64_t cursor_ms = 0;
  /// The occurrences in [doubt_ms, cursor_ms) were claimed by the last
  /// claim, whose tasks may not all have been made (the claimant may have
  /// died): the next owner makes those still in the future again (with
  /// on_conflict::keep), and counts the past ones as done.
  std::int64_t doubt_ms = 0;
  /// When the definition was last written (ms), for people.
  std::int64_t updated_ms = 0;
  /// Which keeper wrote the last claim (a random number each keeper draws):
  /// a keeper that finds its compare-and-set lost tells its own claim,
  /// landed though its answer was lost, from another keeper's.
  std::uint64_t claimant = 0;

  friend bool operator==(const schedule_state&, const schedule_state&) = default;
};

/// The definition bytes of `s` (its id is the store's key, not in here).
std::string encode_definition(const schedule& s);
/// The schedule stored as `bytes` under `id`, or nothing.
std::optional<schedule> decode_definition(std::string_view id, std::string_view bytes);

std::string encode_state(const schedule_state& st);
std::optional<schedule_state> decode_state(std::string_view bytes);

}  // namespace delayq::detail::schedules
