// setting_values: how server_settings reads and shows one value (a whole
// number, a duration, a secret file), each refusal a config_error whose
// message the caller prefixes with where the value came from.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace delayq::server {

/// A whole number within [lo, hi]; throws config_error ("wants a whole
/// number from LO to HI, got ...").
std::int64_t whole(const std::string& text, std::int64_t lo, std::int64_t hi);

/// A duration ("30s", "250ms", parse_duration()) within [lo, hi]; `range`
/// says the bounds in the error ("0s to 1h").
std::chrono::milliseconds duration_within(const std::string& text, std::chrono::milliseconds lo,
                                          std::chrono::milliseconds hi, const char* range);

/// "30s" for 30000 ms: the largest unit that divides it.
std::string show_duration(std::chrono::milliseconds d);

/// The message of a check that names its flag ("--push-allow \"x\": ..."),
/// without the flag: the caller says where the value came from.
std::string without_flag(std::string message, std::string_view flag);

/// Why a file that holds a secret is not safe to take one from (empty: it
/// is). Like ssh with its keys: nobody but root and the server's user may
/// own it, and nobody else may read or change it.
std::string unsafe_secret_file(const struct stat& st);

/// The secret a file holds: its bytes less one line end. Refuses (throws
/// config_error) a file that others can read or change, one not owned by
/// root or the server's user, an empty one, and bytes a header cannot carry.
std::string read_secret_file(const std::string& path);

}  // namespace delayq::server
