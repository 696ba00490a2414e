// Where a task held by the engine is, kept in its wheel record's owner word.
//
// The word is what makes cancel() truthful. A due task waits in the ready
// queue (or behind a per-type limit) as a reference {handle, word}; a worker
// starts it only by swapping the word from queued to running with one atomic
// compare-and-swap, and cancel() (under the engine's lock) takes it away by
// swapping queued to something else. Exactly one of them wins, so "cancel()
// returned true" and "an attempt started" cannot both happen.
//
// Layout: bits 0-2 the state, bit 3 `orphaned`, bit 4 `fresh`, bits 5-31 a
// generation. The generation grows each time the task is queued, so a
// reference left behind in the queue by a task that was since rescheduled,
// re-queued or freed does not match the word any more (it would take 2^27
// queueings of one record while such a reference waits to fool it). The wheel never writes this
// word after a record's construction, so it survives the record's reuse.
//
// Who frees a record that a queue reference may still point at: the engine
// frees a record only when no reference can name it (state not queued and
// never handed to the queue since the last pop) ; a task cancelled while
// queued goes `dead` instead and the worker that pops its reference frees
// it, or, when a cancel's store write was in flight as the worker popped it
// (`orphaned`), the cancel's completion does.
#pragma once

#include <atomic>
#include <cstdint>

namespace delayq::detail::task_state_word {

enum state : std::uint32_t {
  armed = 0,       // in a slot, or detached under the lock while being changed
  persisting = 1,  // a store write about it is in flight; calls on the id wait
  queued = 2,      // due: in the ready queue or behind a per-type limit
  running = 3,     // an attempt started
  cancelling = 4,  // was queued; a cancel's store write is in flight
  dead = 5,        // cancelled while queued; unindexed; whoever pops it frees it
};

inline constexpr std::uint32_t state_mask = 7;
inline constexpr std::uint32_t orphaned = 8;  // popped while cancelling: the queue let go of it
inline constexpr std::uint32_t fresh = 16;    // persisting, and never acknowledged: not visible yet
inline constexpr std::uint32_t generation_step = 32;
inline constexpr std::uint32_t generation_mask = ~(generation_step - 1);

constexpr state state_of(std::uint32_t w) noexcept { return static_cast<state>(w & state_mask); }
constexpr std::uint32_t generation(std::uint32_t w) noexcept { return w & generation_mask; }
/// The word in state `s`, same generation, flags cleared.
constexpr std::uint32_t with_state(std::uint32_t w, state s) noexcept { return generation(w) | s; }
/// The word with the next generation and state `s` (invalidates references).
constexpr std::uint32_t next_generation(std::uint32_t w, state s) noexcept {
  return (generation(w) + generation_step) | s;
}
/// The word of a task queued anew: the next generation, state queued.
constexpr std::uint32_t next_queued(std::uint32_t w) noexcept { return next_generation(w, queued); }

/// The word of record `tag` as an atomic (the word is a plain uint32 in the
/// wheel's record; every access that may race goes through this).
inline std::atomic_ref<std::uint32_t> word(std::uint32_t& tag) noexcept {
  return std::atomic_ref<std::uint32_t>(tag);
}

}  // namespace delayq::detail::task_state_word
