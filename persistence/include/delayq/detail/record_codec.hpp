// delayq/detail/record_codec.hpp - the versioned binary form of a stored task.
//
// Every backend stores a task as one opaque record produced here, so a record
// means the same thing in Redis, in SQLite and in a file copied between them.
//
// Layout (all integers little-endian; cereal's portable binary archive):
//
//   offset  size  field
//   0       4     magic "DQTR"
//   4       1     byte order flag, always 1 (little-endian; cereal's own)
//   5       2     format version, uint16 (1 today)
//   7       ...   the fields of that version, in order:
//     v1:   id       uint64 length + bytes
//           type     uint64 length + bytes
//           payload  uint64 length + bytes (any bytes, NUL and 0xFF included)
//           due      int64 milliseconds since the Unix epoch
//           attempts uint32
//
// A later version appends its fields after the v1 fields (for example
// last_error as a length-prefixed string and died_at as int64 ms), so the
// decoder of version N reads the fields of every version <= N in order. The
// record must end exactly after the last field of its version: trailing
// bytes are corruption. See docs/persistence.md.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "delayq/task.hpp"

namespace delayq::detail {

/// The format version encode_record() writes, and the newest one
/// decode_record() accepts.
inline constexpr std::uint16_t record_format_version = 1;

/// Bytes before the fields: magic, byte order flag, version.
inline constexpr std::size_t record_header_size = 7;

/// Encodes `t` in the current format version.
///
/// Errors: throws only std::bad_alloc.
/// Thread safety: a pure function.
std::string encode_record(const task& t);

/// Decodes a record of any version from 1 to record_format_version.
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

}  // namespace delayq::detail
