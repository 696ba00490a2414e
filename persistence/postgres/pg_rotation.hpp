// persistence/postgres/pg_rotation.hpp - keeps the live tasks' table from
// growing without bound while rows churn. Internal. (Placeholder: the
// rotation itself comes with the churn measurements.)
#pragma once

#include <cstddef>

namespace delayq::detail::pg {

class backend;

/// Thread safety: note_writes() from any thread.
class rotation {
 public:
  explicit rotation(backend& b) : backend_(b) {}
  void note_writes(std::size_t changes) noexcept { (void)changes; }

 private:
  [[maybe_unused]] backend& backend_;
};

}  // namespace delayq::detail::pg
