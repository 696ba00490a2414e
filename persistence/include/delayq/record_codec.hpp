// delayq/record_codec.hpp - the versioned binary form of a stored task and of
// a dead letter: the codec every store delayq ships uses, public so that a
// store of your own writes records the others can read (target
// delayq::codec).
//
// A record means the same thing in Redis, in SQLite and in a file copied
// between them. Layout (all integers little-endian; cereal's portable binary
// archive underneath, never visible here):
//
//   offset  size  field
//   0       4     magic "DQTR"
//   4       1     byte order flag, always 1 (little-endian)
//   5       2     format version, uint16 (1 to 4): record_version() reads it
//   7       ...   the fields of that version, in order:
//     v1:   id       uint64 length + bytes
//           type     uint64 length + bytes
//           payload  uint64 length + bytes (any bytes, NUL and 0xFF included)
//           due      int64 milliseconds since the Unix epoch
//           attempts uint32
//     v2:   error    uint64 length + bytes (why the last attempt failed)
//           died_at  int64 milliseconds since the Unix epoch
//     v3:   trigger_count  uint32 (signals that make the task run early)
//           signals        uint32 (signals received so far)
//     v4:   priority       uint32 (lower runs first among a consumer's ready tasks)
//           ttr            uint32 milliseconds (a reserving consumer's lease; 0: its own)
//
// Versioning rule: a later version appends its fields after those of the
// earlier ones, so the decoder of version N reads the fields of every
// version <= N in order. A record must end exactly after the last field of
// its version: trailing bytes are corruption. A record whose version is 0 or
// newer than record_format_version is rejected (a store quarantines it; it
// never deletes it), so an old build never misreads a newer record.
//
// Which version is written: a live task is written as version 1
// (task_record_version), so a build that knows only version 1 keeps reading
// every live task during a rolling upgrade; a dead letter is written as
// version 2 (dead_letter_record_version); either of them, when the task is
// count-triggered (trigger_count > 0), as version 3 (trigger_record_version),
// which a build older than count-triggered tasks quarantines rather than
// misreads; and any of them, when the task has a priority or a ttr
// (priority != 0 or ttr != 0), as version 4 (priority_record_version), which
// holds the fields of version 2 and 3 too (error empty and died_at 0 for a
// live task, trigger_count 0 for a task that is not count-triggered). decode_task() reads every
// version (a version 2 record copied back by hand into the live area is a valid task);
// decode_dead_letter() needs version 2 or later.
//
// Times are kept to the millisecond: a sub-millisecond part is dropped.
//
// Example (a store of your own):
// \code
//   std::string bytes = delayq::encode_task(t);          // write these bytes
//   boost::system::error_code ec;
//   std::string why;
//   delayq::task back = delayq::decode_task(bytes, ec, &why);
//   if (ec) quarantine(id, bytes, why);                    // errc::corrupt_record
// \endcode
//
// Errors: the decoders report a damaged record as errc::corrupt_record, in
// an error_code& form (never throws except std::bad_alloc) and a throwing
// form (boost::system::system_error). The encoders throw only
// std::bad_alloc.
//
// Thread safety: every function here is pure (no shared state): safe to call
// from any number of threads at once.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "delayq/task.hpp"

namespace delayq {

/// The newest format version the decoders of this build accept.
inline constexpr std::uint16_t record_format_version = 4;

/// The version encode_task() writes (readers that know only version 1 must
/// keep reading live tasks).
inline constexpr std::uint16_t task_record_version = 1;

/// The version encode_dead_letter() writes: the first with error and died_at.
inline constexpr std::uint16_t dead_letter_record_version = 2;
/// The version both encoders write for a count-triggered task
/// (task::trigger_count > 0): the first with trigger_count and signals. A
/// live task written so has an empty error and died_at 0. Records of
/// versions 1 and 2 decode with trigger_count and signals 0.
inline constexpr std::uint16_t trigger_record_version = 3;
/// The version both encoders write for a task with a priority or a ttr
/// (task::priority != 0 or task::ttr != 0), count-triggered or not: the
/// first with priority and ttr (a uint32 of milliseconds: a ttr past it is
/// stored as its largest value). Its trigger_count may be 0. Records of
/// versions 1 to 3 decode with priority 0 and ttr 0.
inline constexpr std::uint16_t priority_record_version = 4;

/// Bytes before the fields: magic, byte order flag, version.
inline constexpr std::size_t record_header_size = 7;

/// The longest error encode_dead_letter() stores, in bytes. A longer one is
/// cut (never inside a UTF-8 sequence) and ends with dead_letter_error_cut,
/// the whole staying within this size, so a runaway exception message cannot
/// bloat the store.
inline constexpr std::size_t max_dead_letter_error = 4096;

/// What ends an error that encode_dead_letter() cut to max_dead_letter_error.
inline constexpr std::string_view dead_letter_error_cut = " [truncated]";

/// Encodes `t` as a task_record_version record (trigger_record_version or
/// priority_record_version when it carries their fields).
///
/// Errors: throws only std::bad_alloc.
std::string encode_task(const task& t);

/// Decodes a record of any version from 1 to record_format_version as a
/// task (the fields a version 2 record adds are checked, then dropped).
///
/// On failure returns a default task and sets `ec` to errc::corrupt_record:
/// wrong magic or byte order flag, a version of 0 or newer than this build,
/// a truncated field, a length prefix larger than the bytes left, a time
/// outside what std::chrono::system_clock holds, or bytes after the last
/// field. When `reason` is not null it receives a short human-readable cause
/// ("truncated", "unknown format version 7", ...). Never reads past `bytes`
/// and never allocates more than `bytes.size()` for a field, whatever the
/// length prefixes say.
///
/// Errors: reported through `ec`; throws only std::bad_alloc.
task decode_task(std::string_view bytes, boost::system::error_code& ec,
                 std::string* reason = nullptr);

/// Throwing form of decode_task(): throws boost::system::system_error
/// carrying errc::corrupt_record, with the reason in what().
task decode_task(std::string_view bytes);

/// decode_task() of the live record a store keeps under `id`: a record that
/// holds another id is as corrupt as one that does not decode (errc::
/// corrupt_record, reason "record holds id '...'"), so every store reading
/// by id quarantines both alike.
///
/// Errors: reported through `ec`; throws only std::bad_alloc.
task decode_stored_task(std::string_view id, std::string_view bytes, boost::system::error_code& ec,
                        std::string* reason = nullptr);

/// `error` as encode_dead_letter() stores it: unchanged when it fits in
/// max_dead_letter_error bytes, else cut and marked (see above).
///
/// Errors: throws only std::bad_alloc.
std::string cap_dead_letter_error(std::string_view error);

/// Encodes `d` as a dead_letter_record_version record (or a later one, as
/// encode_task() picks): the task's fields,
/// then the error (capped by cap_dead_letter_error()) and died_at.
///
/// Errors: throws only std::bad_alloc.
std::string encode_dead_letter(const dead_letter& d);

/// Decodes a dead-letter record (version 2 up to record_format_version).
///
/// Fails as decode_task() does, and also for a version 1 record (a live
/// task has no error and no died_at): a default dead_letter is returned and
/// `ec` is set to errc::corrupt_record, with the cause in `reason` when not
/// null. Never reads past `bytes` nor allocates beyond its size.
///
/// Errors: reported through `ec`; throws only std::bad_alloc.
dead_letter decode_dead_letter(std::string_view bytes, boost::system::error_code& ec,
                               std::string* reason = nullptr);

/// Throwing form of decode_dead_letter(): throws boost::system::system_error
/// carrying errc::corrupt_record, with the reason in what().
dead_letter decode_dead_letter(std::string_view bytes);

/// The format version in a record's header, without decoding its fields:
/// for a store that routes records by version, or reports what it holds.
/// Checks the magic and byte order flag only; a version this build does not
/// know is returned as it is (decode_task() would reject it).
///
/// On a header that is short or damaged returns 0 and sets `ec` to
/// errc::corrupt_record (with the cause in `reason` when not null).
///
/// Errors: reported through `ec`; throws only std::bad_alloc.
std::uint16_t record_version(std::string_view bytes, boost::system::error_code& ec,
                             std::string* reason = nullptr);

/// Throwing form of record_version(): throws boost::system::system_error
/// carrying errc::corrupt_record.
std::uint16_t record_version(std::string_view bytes);

}  // namespace delayq
