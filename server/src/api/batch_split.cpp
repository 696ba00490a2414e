#include "api/batch_split.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "wire/dump_json.hpp"

namespace delayq::server {
namespace {

using nlohmann::json;

// The ids a 201 part answered, one per task of the part; nothing when the
// answer is not that (a peer that answers otherwise is treated as failed).
std::optional<std::vector<std::string>> stored_ids(const http_answer& a, std::size_t n) {
  if (a.status != 201) return std::nullopt;
  const json j = json::parse(a.body, nullptr, false);
  if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array() || j["ids"].size() != n)
    return std::nullopt;
  std::vector<std::string> ids;
  for (const json& id : j["ids"]) {
    if (!id.is_string()) return std::nullopt;
    ids.push_back(id.get<std::string>());
  }
  return ids;
}

// "tasks[k]: ..." of a part, with k its position in the part, becomes the
// same with the task's position in the batch.
std::string batch_message(std::string message, const batch_part& part) {
  constexpr std::string_view prefix = "tasks[";
  if (!message.starts_with(prefix)) return message;
  const char* first = message.data() + prefix.size();
  const char* last = message.data() + message.size();
  std::size_t k = 0;
  const auto [p, ec] = std::from_chars(first, last, k);
  if (ec != std::errc{} || p == last || *p != ']' || k >= part.index.size()) return message;
  return std::string(prefix) + std::to_string(part.index[k]) + message.substr(p - message.data());
}

}  // namespace

std::vector<batch_part> split_batch(const std::vector<add_request>& tasks,
                                    const std::function<std::string(const std::string&)>& owner_of,
                                    const std::string& self) {
  std::map<std::string, std::vector<std::size_t>> by_owner;  // "" is this instance
  std::vector<std::size_t> floating;                         // tasks without an id
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].id.empty()) {
      floating.push_back(i);
      continue;
    }
    std::string owner = owner_of(tasks[i].id);
    if (owner == self) owner.clear();
    by_owner[owner].push_back(i);
  }
  // Tasks without an id may be stored anywhere: with the ids' one owner
  // when there is one (the batch stays one atomic write there), else here.
  if (by_owner.size() <= 1) {
    auto& part = by_owner.empty() ? by_owner[""] : by_owner.begin()->second;
    part.insert(part.end(), floating.begin(), floating.end());
    std::sort(part.begin(), part.end());
  } else if (!floating.empty()) {
    auto& here = by_owner[""];
    here.insert(here.end(), floating.begin(), floating.end());
    std::sort(here.begin(), here.end());
  }
  std::vector<batch_part> parts;
  for (auto& [owner, index] : by_owner)
    if (!index.empty()) parts.push_back({owner, std::move(index)});
  std::sort(parts.begin(), parts.end(), [](const batch_part& x, const batch_part& y) {
    return x.index.front() < y.index.front();
  });
  return parts;
}

std::string first_named_id(const std::vector<add_request>& tasks, const batch_part& part) {
  for (const std::size_t i : part.index)
    if (!tasks[i].id.empty()) return tasks[i].id;
  return {};
}

http_answer join_batch_answers(std::size_t total, const std::vector<batch_part>& parts,
                               const std::vector<http_answer>& answers) {
  json ids = json::array();
  for (std::size_t i = 0; i < total; ++i) ids.push_back(nullptr);
  json failed = json::array();
  const batch_part* first_failed = nullptr;
  json first_error;
  std::size_t stored = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const batch_part& part = parts[k];
    const http_answer& a = answers[k];
    if (auto got = stored_ids(a, part.index.size())) {
      for (std::size_t j = 0; j < part.index.size(); ++j) ids[part.index[j]] = (*got)[j];
      stored += part.index.size();
      continue;
    }
    json e = json::parse(a.body, nullptr, false);
    std::string name = "bad_gateway";
    std::string message = "instance " + part.instance + " answered HTTP " +
                          std::to_string(a.status) + " without the ids of its tasks";
    if (e.is_object() && e.value("error", json()).is_string() &&
        e.value("message", json()).is_string() && a.status >= 400) {
      name = e["error"].get<std::string>();
      message = batch_message(e["message"].get<std::string>(), part);
    }
    json f{{"instance", part.instance},
           {"tasks", part.index},
           {"status", a.status},
           {"error", name},
           {"message", message}};
    if (first_failed == nullptr || part.index.front() < first_failed->index.front()) {
      first_failed = &part;
      first_error = f;
    }
    failed.push_back(std::move(f));
  }
  http_answer out;
  if (first_failed == nullptr) {
    out.status = 201;
    out.body = dump_json(json{{"ids", std::move(ids)}});
    return out;
  }
  const unsigned status = first_error["status"].get<unsigned>();
  out.status = status >= 400 && status < 600 ? status : 502;
  out.body = dump_json(
      json{{"error", first_error["error"]},
           {"message", first_error["message"].get<std::string>() + " (" + std::to_string(stored) +
                           " of the batch's " + std::to_string(total) + " tasks were stored, " +
                           std::to_string(parts.size()) +
                           " instances took part; \"ids\" and \"failed\" say which)"},
           {"ids", std::move(ids)},
           {"failed", std::move(failed)}});
  // Retry-After invites a retry of the whole batch, which would store the
  // tasks without an id again: only when nothing was stored.
  if (out.status == 503 && stored == 0) out.headers.emplace_back("Retry-After", "1");
  return out;
}

}  // namespace delayq::server
