// make_seeds - writes the seed corpus of both fuzz targets.
//
//   make_seeds <dir>   writes <dir>/fuzz_record_decode/* and <dir>/fuzz_wheel/*
//
// Run by `bash tests/fuzz/run.sh --seeds`, which regenerates
// tests/fuzz/corpus/; the files are checked in. Records come from the real
// encoder, so they stay valid when the format changes (rerun it then); wheel
// programs are spelled with the opcodes of wheel_program.hpp.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "delayq/record_codec.hpp"
#include "delayq/task.hpp"
#include "wheel_program.hpp"

namespace fs = std::filesystem;
using namespace delayq::fuzz;

namespace {

void write(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("make_seeds: cannot write " + file.string());
}

delayq::task make(std::string id, std::string type, std::string payload, std::int64_t due_ms,
                  std::uint32_t attempts) {
  delayq::task t;
  t.id = std::move(id);
  t.type = std::move(type);
  t.payload = std::move(payload);
  t.due = delayq::from_epoch_ms(due_ms);
  t.attempts = attempts;
  return t;
}

void record_seeds(const fs::path& dir) {
  using delayq::encode_task;
  constexpr auto max_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::duration::max())
                              .count();
  const std::string typical =
      encode_task(make("order:42", "email.send", R"({"to":"a@b.c"})", 1'700'000'000'123, 3));
  write(dir / "valid-typical", typical);
  write(dir / "valid-empty-task", encode_task(delayq::task{}));
  write(dir / "valid-binary-payload",
        encode_task(
            make(std::string("id\0x", 4), "t", std::string("\0\xff\x01\xfe", 4), -5, 0xffffffffu)));
  write(dir / "valid-1k-payload", encode_task(make("big", "blob", std::string(1024, 'z'), 0, 1)));
  write(dir / "valid-due-max", encode_task(make("m", "t", "", max_ms, 0)));
  write(dir / "valid-due-min", encode_task(make("m", "t", "", -max_ms, 0)));
  // A few damaged ones, each rejected for a different reason.
  write(dir / "bad-truncated", typical.substr(0, typical.size() - 1));
  write(dir / "bad-trailing-byte", typical + '\0');
  std::string v3 = typical;
  v3[5] = 3;
  write(dir / "bad-version-3", v3);
  std::string v2 = typical;  // version 2 without its fields
  v2[5] = 2;
  write(dir / "bad-version-2-short", v2);
  // Version 4: a priority and a ttr, after the version 2 and 3 fields
  // (trigger_count 0 is allowed there); and its header on a version 1 body.
  delayq::task prio = make("job:7", "beanstalk.default", "hello", 1'700'000'000'123, 0);
  prio.priority = 1024;
  prio.ttr = std::chrono::milliseconds{120'000};
  write(dir / "valid-priority-ttr", encode_task(prio));
  std::string v4 = typical;
  v4[5] = 4;
  write(dir / "bad-version-4-short", v4);

  // Dead letters (version 2).
  using delayq::encode_dead_letter;
  delayq::dead_letter d;
  d.task = make("order:42", "email.send", "{}", 1'700'000'000'123, 5);
  d.error = "smtp: connection refused";
  d.died_at = delayq::from_epoch_ms(1'700'000'060'000);
  write(dir / "dead-typical", encode_dead_letter(d));
  write(dir / "dead-empty", encode_dead_letter(delayq::dead_letter{}));
  d.error = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // UTF-8: 2, 3 and 4 bytes
  write(dir / "dead-utf8-error", encode_dead_letter(d));
  d.task.priority = 7;  // buried with a priority: version 4
  write(dir / "dead-priority", encode_dead_letter(d));
  // Not a record: read by the encoder-side check of a dead letter (see
  // check_dead_letter_round_trip): empty id, type and payload, zero times,
  // an error of 5000 bytes repeating UTF-8 characters of 2, 3 and 4 bytes,
  // which encode_dead_letter() must cut between two characters.
  std::string cut(2 + 8 + 4 + 1 + 8, '\0');
  cut += "\x88\x13";  // 5000, little-endian
  cut += "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  write(dir / "encoder-cut-utf8-error", cut);
  std::string huge = typical;
  huge[delayq::record_header_size + 7] = '\x7f';  // id length ~ 2^62
  write(dir / "bad-huge-length", huge);
}

// A wheel program under construction.
class program {
 public:
  explicit program(std::size_t slots) {
    for (std::size_t i = 0; i < wheel_slot_counts.size(); ++i)
      if (wheel_slot_counts[i] == slots) bytes_.push_back(static_cast<char>(i));
  }
  program& op(wheel_op o, std::initializer_list<unsigned> operands = {}) {
    bytes_.push_back(static_cast<char>(o));
    return raw(operands);
  }
  // Operands, or the bytes the sink reads during the advance just written.
  program& raw(std::initializer_list<unsigned> bytes) {
    for (unsigned b : bytes) bytes_.push_back(static_cast<char>(b));
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

void wheel_seeds(const fs::path& dir) {
  {  // Insert a few, let them fire one by one.
    program p(3600);
    for (unsigned id = 1; id <= 5; ++id) p.op(op_insert, {id, due_byte(due_near, id * 3)});
    p.op(op_advance, {step_byte(step_ticks, 5)})
        .raw({sink_byte(sink_erase)})
        .op(op_wake)
        .raw({sink_byte(sink_erase)})
        .op(op_advance_revolution)
        .raw({sink_byte(sink_erase), sink_byte(sink_erase), sink_byte(sink_erase)});
    write(dir / "basic", p.bytes());
  }
  {  // Many tasks on few ticks: order within a tick; the sink re-arms and keeps.
    program p(7);
    for (unsigned id = 0; id < 10; ++id) p.op(op_insert, {id, due_byte(due_crowded, id)});
    p.op(op_advance, {step_byte(step_ticks, 2)})
        .raw({sink_byte(sink_rearm), due_byte(due_crowded, 1), sink_byte(sink_keep),
              sink_byte(sink_erase), sink_byte(sink_rearm), due_byte(due_past, 3)})
        .op(op_arm, {1, due_byte(due_near, 0)})
        .op(op_advance, {step_byte(step_ticks, 4)});
    write(dir / "crowded-ticks", p.bytes());
  }
  {  // Long delays, wrap-around and jumps over many revolutions.
    program p(64);
    p.op(op_insert, {1, due_byte(due_revolution, 9)})
        .op(op_insert, {2, due_byte(due_far, 0)})
        .op(op_insert, {3, due_byte(due_long, 20)})
        .op(op_insert, {4, due_byte(due_slot_end, 1)})
        .op(op_insert, {5, due_byte(due_revolution, 31)})
        .op(op_wake)
        .op(op_advance_revolution)
        .op(op_advance, {step_byte(step_many, 10)})
        .op(op_wake)
        .op(op_wake)
        .op(op_advance, {step_byte(step_backwards, 3)});
    write(dir / "long-delays", p.bytes());
  }
  {  // Detached nodes, tags, assign on a single-slot wheel.
    program p(1);
    p.op(op_insert_detached, {1})
        .op(op_insert_detached_arm, {2, due_byte(due_near, 2)})
        .op(op_set_tag, {1, 0xab})
        .op(op_arm, {1, due_byte(due_near, 2)})
        .op(op_reschedule, {2, due_byte(due_near, 1)})
        .op(op_insert, {2, due_byte(due_near, 1)})  // duplicate: refused
        .op(op_disarm, {1})
        .op(op_advance_one)
        .op(op_assign, {1})
        .op(op_reschedule, {9, due_byte(due_near, 1)})  // not held
        .op(op_advance, {step_byte(step_ticks, 9)});
    write(dir / "detached-and-tags", p.bytes());
  }
  {  // Churn: cancel and move armed tasks, so slot bounds go stale; wake.
    program p(65);
    for (unsigned id = 0; id < 12; ++id) p.op(op_insert, {id, due_byte(due_near, id)});
    p.op(op_erase_id, {0})
        .op(op_erase_handle, {1})
        .op(op_reschedule, {2, due_byte(due_far, 1)})
        .op(op_disarm, {3})
        .op(op_erase_id, {30})  // not held
        .op(op_wake)
        .op(op_wake)
        .op(op_wake)
        .op(op_advance_again, {step_byte(step_revolutions, 2)});
    write(dir / "churn-and-wake", p.bytes());
  }
  {  // A batch cancel of held ids, a repeat and one never held, among armed tasks.
    program p(7);
    for (unsigned id = 0; id < 16; ++id) p.op(op_insert, {id, due_byte(due_near, id)});
    p.op(op_erase_many, {7, 1, 3, 5, 3, 31, 8, 9, 10})  // 8 ids: 1 3 5 3 31 8 9 10
        .op(op_wake)
        .op(op_advance, {step_byte(step_ticks, 40)});
    write(dir / "erase-many", p.bytes());
  }
  {  // The sink touches nodes due at the same tick before their turn.
    program p(2);
    for (unsigned id = 1; id <= 6; ++id) p.op(op_insert, {id, due_byte(due_crowded, 0)});
    p.op(op_advance_one)
        .raw({sink_byte(sink_keep, touch_erase), 2,                            // erase 2
              sink_byte(sink_erase, touch_disarm), 4,                          // 3 fires; disarm 4
              sink_byte(sink_rearm, touch_arm), due_byte(due_past, 0), 6,      // 5 again at
              due_byte(due_crowded, 0),                                        //   now + 1, and 6
              sink_byte(sink_erase, touch_insert), 7, due_byte(due_past, 0)})  // 5; insert 7
        .op(op_wake)
        .op(op_wake);
    write(dir / "sink-interference", p.bytes());
  }
  {  // Every id, erased and inserted again: the id index grows and shifts.
    program p(130);
    p.op(op_reserve, {20});
    for (unsigned id = 0; id < id_count; ++id) p.op(op_insert, {id, due_byte(due_near, id)});
    for (unsigned id = 0; id < id_count; id += 2) p.op(op_erase_id, {id});
    for (unsigned id = 0; id < id_count; id += 2) p.op(op_insert_detached, {id});
    p.op(op_advance, {step_byte(step_ticks, 40)});
    write(dir / "index-churn", p.bytes());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const fs::path root = argv[1];
  try {
    fs::create_directories(root / "fuzz_record_decode");
    fs::create_directories(root / "fuzz_wheel");
    record_seeds(root / "fuzz_record_decode");
    wheel_seeds(root / "fuzz_wheel");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
