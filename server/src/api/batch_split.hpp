// api/batch_split.hpp - under --cluster, a POST /v1/tasks:batch whose ids
// belong to several instances: which tasks go where, and the one answer
// made of the parts' answers (docs/scale-out.md, "Batches across owners").
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "http/http_server.hpp"
#include "wire/request_codec.hpp"

namespace delayq::server {

/// The tasks of a batch one instance stores, in one atomic write there.
/// Thread safety: a plain value.
struct batch_part {
  /// The instance; empty for this one.
  std::string instance;
  /// The tasks' positions in the batch, ascending.
  std::vector<std::size_t> index;
};

/// Splits a batch by the owner of each task's id; ids `owner_of` gives to
/// `self` or to nobody (no lease round answered yet: the engine then says
/// not_owner itself) are this instance's (instance ""). Tasks without an id
/// join the ids' owner when all ids have one (so such a batch stays one
/// part, stored in one atomic write), else this instance's part. Parts come
/// in the order of their first task; an empty batch has none.
/// Thread safety: a pure function (`owner_of` must be safe to call).
std::vector<batch_part> split_batch(const std::vector<add_request>& tasks,
                                    const std::function<std::string(const std::string&)>& owner_of,
                                    const std::string& self);

/// The id of the first task of `part` that has one ("" when none has):
/// what a forward of the part names in its errors.
/// Thread safety: a pure function.
std::string first_named_id(const std::vector<add_request>& tasks, const batch_part& part);

/// One answer for a batch of `total` tasks from the answers of its parts
/// (`answers[k]` answers `parts[k]`). All 201: 201 `{"ids": [...]}` in the
/// batch's order. Otherwise the status and error name of the failed part
/// with the first task, and a body that says what happened to each task:
///   {"error", "message",
///    "ids":    [the id of each task stored, null for the others],
///    "failed": [{"instance", "tasks": [positions], "status", "error",
///                "message"}, ...]}
/// A part that answered outcome_unknown may have been stored: its tasks are
/// null in "ids" and the part is listed under "failed" with that name.
/// A part's "tasks[k]" in a message is rewritten to the batch's position.
/// Thread safety: a pure function.
http_answer join_batch_answers(std::size_t total, const std::vector<batch_part>& parts,
                               const std::vector<http_answer>& answers);

}  // namespace delayq::server
