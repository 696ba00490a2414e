// delayq/detail/record_codec.hpp - the versioned binary form of a stored task
// and of a dead letter.
//
// Every backend stores a task as one opaque record produced here, so a record
// means the same thing in Redis, in SQLite and in a file copied between them.
//
// Layout (all integers little-endian; cereal's portable binary archive):
//
//   offset  size  field
//   0       4     magic "DQTR"
//   4       1     byte order flag, always 1 (little-endian; cereal's own)
//   5       2     format version, uint16 (1 or 2)
//   7       ...   the fields of that version, in order:
//     v1:   id       uint64 length + bytes
//           type     uint64 length + bytes
//           payload  uint64 length + bytes (any bytes, NUL and 0xFF included)
//           due      int64 milliseconds since the Unix epoch
//           attempts uint32
//     v2:   error    uint64 length + bytes (why the last attempt failed)
//           died_at  int64 milliseconds since the Unix epoch
//
// A later version appends its fields after those of the earlier ones, so the
// decoder of version N reads the fields of every version <= N in order. The
// record must end exactly after the last field of its version: trailing
// bytes are corruption. See docs/persistence.md.
//
// Which version is written: a live task is still written as version 1, so a
// build that knows only version 1 keeps reading every live task during a
// rolling upgrade; a dead letter is written as version 2 (only builds that
// know dead letters read the dead-letter area). decode_record() reads both
// versions as a task (a version 2 record copied back by hand into the live
// area is a valid task); decode_dead_letter() needs version 2 or later.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "delayq/task.hpp"

namespace delayq::detail {

/// The newest format version the decoders accept.
inline constexpr std::uint16_t record_format_version = 2;

/// The version encode_record() writes for a live task (see above: readers
/// that know only version 1 must keep reading live tasks).
inline constexpr std::uint16_t task_record_version = 1;

/// The version encode_dead_letter() writes: the first with error and died_at.
inline constexpr std::uint16_t dead_letter_record_version = 2;

/// The longest error encode_dead_letter() stores, in bytes. A longer one is
/// cut (never inside a UTF-8 sequence) and ends with dead_letter_error_cut,
/// the whole staying within this size, so a runaway exception message cannot
/// bloat the store.
inline constexpr std::size_t max_dead_letter_error = 4096;

/// What ends an error that encode_dead_letter() cut to max_dead_letter_error.
inline constexpr std::string_view dead_letter_error_cut = " [truncated]";

/// Bytes before the fields: magic, byte order flag, version.
inline constexpr std::size_t record_header_size = 7;

/// Encodes `t` as a task_record_version record.
///
/// Errors: throws only std::bad_alloc.
/// Thread safety: a pure function.
std::string encode_record(const task& t);

/// Decodes a record of any version from 1 to record_format_version as a
/// task (the fields a version 2 record adds are checked, then dropped).
///
/// On failure returns a default task and sets `ec` to errc::corrupt_record:
/// wrong magic or byte order flag, a version of 0 or newer than this build,
/// a truncated field, a length prefix larger than the bytes left, or bytes
/// after the last field. When `reason` is not null it receives a short
/// human-readable cause ("truncated", "unknown format version 7", ...).
/// Never reads past `bytes` and never allocates more than `bytes.size()`
/// for a field, whatever the length prefixes say.
///
/// Errors: reported through `ec`; throws only std::bad_alloc.
/// Thread safety: a pure function.
task decode_record(std::string_view bytes, boost::system::error_code& ec,
                   std::string* reason = nullptr);

/// Throwing form of decode_record(): throws boost::system::system_error
/// carrying errc::corrupt_record.
task decode_record(std::string_view bytes);

/// `error` as encode_dead_letter() stores it: unchanged when it fits in
/// max_dead_letter_error bytes, else cut and marked (see above).
///
/// Errors: throws only std::bad_alloc.
/// Thread safety: a pure function.
std::string cap_dead_letter_error(std::string_view error);

/// Encodes `d` as a dead_letter_record_version record: the task's fields,
/// then the error (capped by cap_dead_letter_error()) and died_at. Times
/// are kept to the millisecond.
///
/// Errors: throws only std::bad_alloc.
/// Thread safety: a pure function.
std::string encode_dead_letter(const dead_letter& d);

/// Decodes a dead-letter record (version 2 up to record_format_version).
///
/// Fails as decode_record() does, and also for a version 1 record (a live
/// task has no error and no died_at): a default dead_letter is returned and
/// `ec` is set to errc::corrupt_record, with the cause in `reason` when not
/// null. Never reads past `bytes` nor allocates beyond its size.
///
/// Errors: reported through `ec`; throws only std::bad_alloc.
/// Thread safety: a pure function.
dead_letter decode_dead_letter(std::string_view bytes, boost::system::error_code& ec,
                               std::string* reason = nullptr);

/// Throwing form of decode_dead_letter(): throws boost::system::system_error
/// carrying errc::corrupt_record.
dead_letter decode_dead_letter(std::string_view bytes);

}  // namespace delayq::detail
