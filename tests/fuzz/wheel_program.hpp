// wheel_program.hpp - the byte language fuzz_wheel executes, shared with the
// seed generator (make_seeds.cpp) so that checked-in seeds and the fuzzer
// read bytes the same way.
//
// A program is:
//   byte 0      the wheel's slot count: wheel_slot_counts[b % 8]
//   then ops    one opcode byte (b % op_count), then its operands:
//     insert               id, due     insert(task, due)
//     insert_detached      id          insert_detached(task)
//     insert_detached_arm  id, due     insert_detached(task), then arm(h, due)
//     erase_id             id          erase(id) (the id may not be held)
//     erase_handle         id          erase(handle), when held
//     reschedule           id, due     reschedule(id, due) (may not be held)
//     arm                  id, due     arm(handle, due), when held
//     disarm               id          disarm(handle), when held
//     assign               id          assign(handle, new fields), when held
//     set_tag              id, byte    tag(handle) = byte * 0x01010101
//     advance              step        advance(now + step)
//     advance_one          -           advance(now + 1)
//     wake                 -           advance(next_due_tick())
//     advance_revolution   -           advance(now + slots)
//     reserve              byte        reserve(byte * 16)
//     advance_again        step        as advance
//     erase_many           count, ids  erase_many() of count % 8 + 1 ids
//                                      (held or not, repeats allowed)
// An id byte picks one of id_count ids (b % id_count). A due byte is
// (mode << 5 | v), a step byte (mode << 6 | v); see due_tick() and step_to()
// in fuzz_wheel.cpp for what each mode means.
//
// Each task handed to the sink reads one sink byte (0 when the program has
// ended): bits 0-1 what to do with the fired node (sink_erase, sink_rearm +
// a due byte, sink_keep, sink_erase), bits 2-4 what to do to another node
// (touch_*: erase, arm + due, disarm, insert + due; each with an id byte).
// Reading past the end gives 0 bytes, so every program is valid.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace delayq::fuzz {

inline constexpr std::array<std::size_t, 8> wheel_slot_counts{1, 2, 3, 7, 64, 65, 130, 3600};
inline constexpr unsigned id_count = 32;

enum wheel_op : std::uint8_t {
  op_insert,
  op_insert_detached,
  op_insert_detached_arm,
  op_erase_id,
  op_erase_handle,
  op_reschedule,
  op_arm,
  op_disarm,
  op_assign,
  op_set_tag,
  op_advance,
  op_advance_one,
  op_wake,
  op_advance_revolution,
  op_reserve,
  op_advance_again,
  op_erase_many,
  op_count
};

// Due byte modes (bits 5-7); v is bits 0-4.
enum due_mode : std::uint8_t {
  due_past,        // now - v: at or before now, so due at now + 1
  due_crowded,     // now + 1 + v % 4: few ticks, many tasks, order matters
  due_near,        // now + 1 + v
  due_revolution,  // around the slot of now, 1-4 revolutions on
  due_far,         // (v + 1) * 1000 revolutions on
  due_absolute,    // the tick v
  due_slot_end,    // just before now's slot comes round again
  due_long,        // now + 2^(v + 8): up to 2^39 ticks away
};

// Step byte modes (bits 6-7); v is bits 0-5.
enum step_mode : std::uint8_t {
  step_ticks,        // now + v (0: no movement)
  step_revolutions,  // now + v revolutions, +-1 tick
  step_many,         // (v + 1) * 97 revolutions and v ticks at once
  step_backwards,    // now - v: never moves the wheel
};

// Sink byte: bits 0-1.
enum sink_action : std::uint8_t { sink_erase, sink_rearm, sink_keep, sink_erase_too };
// Sink byte: bits 2-4. 0-3 touch nothing.
enum sink_touch : std::uint8_t {
  touch_erase = 4,   // id
  touch_arm = 5,     // id, due
  touch_disarm = 6,  // id
  touch_insert = 7,  // id, due
};

constexpr std::uint8_t due_byte(due_mode m, unsigned v) {
  return static_cast<std::uint8_t>((unsigned{m} << 5) | (v & 31));
}
constexpr std::uint8_t step_byte(step_mode m, unsigned v) {
  return static_cast<std::uint8_t>((unsigned{m} << 6) | (v & 63));
}
constexpr std::uint8_t sink_byte(sink_action a, unsigned touch = 0) {
  return static_cast<std::uint8_t>(unsigned{a} | ((touch & 7) << 2));
}

}  // namespace delayq::fuzz
