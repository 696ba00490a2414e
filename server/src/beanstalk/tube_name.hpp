// beanstalk/tube_name.hpp - beanstalkd's tube names, and how they map to
// delayq task types and back.
//
// A tube name (beanstalkd's protocol.txt, "Names"): 1-200 bytes of letters,
// digits and `-+/;.$_()`, not starting with '-'. A task type
// (delayq::is_valid_type): 1-128 bytes of letters, digits and `._:-`.
//
// The mapping: letters, digits, '-', '.' and '_' stand for themselves; each
// of `+ / ; $ ( )` becomes ':' and its two uppercase hex digits (`+` is
// ":2B", `/` ":2F", `;` ":3B", `$` ":24", `(` ":28", `)` ":29"). Since ':'
// is never in a tube name, the mapping is one to one:
//
//   tube "emails"          <-> type "emails"
//   tube "app/mail(high)"  <-> type "app:2Fmail:28high:29"
//
// A tube whose type would be longer than 128 bytes has no type (the session
// answers BAD_FORMAT, as for a name beanstalkd refuses). A type with a ':'
// that is not one of those six escapes, spelled exactly so, has no tube (such
// tasks are not listed to beanstalk clients).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace delayq::server::beanstalk {

/// beanstalkd's MAX_TUBE_NAME_LEN - 1.
inline constexpr std::size_t max_tube_name_length = 200;
/// The longest delayq task type.
inline constexpr std::size_t max_type_length = 128;

/// Whether `c` may appear in a tube name (beanstalkd's NAME_CHARS).
bool is_tube_name_char(char c) noexcept;

/// Whether beanstalkd accepts `name` as a tube name (BAD_FORMAT otherwise).
/// Thread safety: a pure function.
bool is_valid_tube_name(std::string_view name) noexcept;

/// The task type of tube `tube`; nullopt when `tube` is not a valid tube
/// name or its type would be over max_type_length bytes.
/// Thread safety: a pure function.
std::optional<std::string> type_of_tube(std::string_view tube);

/// The tube of task type `type`; nullopt when `type` is not a valid task type
/// or is not the image of a tube (a ':' that is not an escape above, or a
/// first byte '-').
/// Thread safety: a pure function.
std::optional<std::string> tube_of_type(std::string_view type);

}  // namespace delayq::server::beanstalk
