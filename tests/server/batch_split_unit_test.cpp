// batch_split_unit_test.cpp - a batch of several owners' ids: which tasks go
// where (split_batch) and the one answer made of the parts' (join_batch_answers).
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "api/batch_split.hpp"
#include "wire/dump_json.hpp"

namespace {

using delayq::server::add_request;
using delayq::server::batch_part;
using delayq::server::http_answer;
using nlohmann::json;

std::vector<add_request> batch_of_ids(const std::vector<std::string>& ids) {
  std::vector<add_request> out;
  for (const std::string& id : ids) {
    add_request r;
    r.id = id;
    out.push_back(std::move(r));
  }
  return out;
}

// Owners by the id's first letter: "a..." is a's.
std::string owner_by_letter(const std::string& id) { return std::string(1, id[0]); }

http_answer batch_reply(unsigned status, const json& body) {
  http_answer a;
  a.status = status;
  a.body = delayq::server::dump_json(body);
  return a;
}

}  // namespace

TEST_CASE("batch split: ids go to their owners, tasks without an id stay with the ids' one owner") {
  // Three owners: a part each, in the order of their first task; this
  // instance ("a") is "", and tasks without an id join it.
  auto parts =
      delayq::server::split_batch(batch_of_ids({"b1", "", "c1", "a1", "b2"}), owner_by_letter, "a");
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].instance == "b");
  CHECK(parts[0].index == std::vector<std::size_t>{0, 4});
  CHECK(parts[1].instance == "");
  CHECK(parts[1].index == std::vector<std::size_t>{1, 3});
  CHECK(parts[2].instance == "c");
  CHECK(parts[2].index == std::vector<std::size_t>{2});

  // One other owner: the whole batch is its part (one atomic write there).
  parts = delayq::server::split_batch(batch_of_ids({"", "b1", "", "b2"}), owner_by_letter, "a");
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].instance == "b");
  CHECK(parts[0].index == std::vector<std::size_t>{0, 1, 2, 3});

  // No id, or only ours, or an owner nobody knows yet: all here.
  parts = delayq::server::split_batch(batch_of_ids({"", "a1"}), owner_by_letter, "a");
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].instance == "");
  parts = delayq::server::split_batch(
      batch_of_ids({"x1", ""}), [](const std::string&) { return std::string{}; }, "a");
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].instance == "");
}

TEST_CASE("batch split: all parts stored answer 201 with the ids in the batch's order") {
  const std::vector<batch_part> parts{{"b", {0, 2}}, {"", {1}}};
  const auto a = delayq::server::join_batch_answers(
      3, parts, {batch_reply(201, {{"ids", {"b1", "b2"}}}), batch_reply(201, {{"ids", {"x"}}})});
  CHECK(a.status == 201);
  CHECK(json::parse(a.body) == json{{"ids", {"b1", "x", "b2"}}});
}

TEST_CASE("batch split: a failed part names its tasks, the stored ones keep their ids") {
  const std::vector<batch_part> parts{{"b", {0, 3}}, {"", {1}}, {"c", {2, 4}}};
  const auto a = delayq::server::join_batch_answers(
      5, parts,
      {batch_reply(201, {{"ids", {"b1", "b2"}}}),
       batch_reply(503, {{"error", "owner_unreachable"}, {"message", "c is gone"}}),
       batch_reply(409, {{"error", "duplicate_id"}, {"message", "tasks[1]: c2 exists"}})});
  // The failed part with the first task decides the status: "" has task 1.
  CHECK(a.status == 503);
  const json j = json::parse(a.body);
  CHECK(j["error"] == "owner_unreachable");
  CHECK(j["ids"] == json{"b1", nullptr, nullptr, "b2", nullptr});
  REQUIRE(j["failed"].size() == 2);
  CHECK(j["failed"][0]["tasks"] == json{1});
  CHECK(j["failed"][1]["instance"] == "c");
  CHECK(j["failed"][1]["status"] == 409);
  // The part's own position 1 is the batch's 4.
  CHECK(j["failed"][1]["message"] == "tasks[4]: c2 exists");
  CHECK(j["message"].get<std::string>().find("2 of the batch's 5 tasks were stored") !=
        std::string::npos);
  // Some were stored: no Retry-After inviting a retry of the whole batch.
  for (const auto& [name, value] : a.headers) CHECK(name != "Retry-After");
  const auto none = delayq::server::join_batch_answers(
      1, {{"c", {0}}}, {batch_reply(503, {{"error", "owner_unreachable"}, {"message", "x"}})});
  CHECK(none.headers.size() == 1);
}

TEST_CASE("batch split: a 201 without the part's ids is a failure, not a success") {
  const std::vector<batch_part> parts{{"b", {0, 1}}};
  auto a =
      delayq::server::join_batch_answers(1 + 1, parts, {batch_reply(201, {{"ids", {"only-one"}}})});
  CHECK(a.status == 502);
  CHECK(json::parse(a.body)["error"] == "bad_gateway");
  a = delayq::server::join_batch_answers(2, parts, {batch_reply(200, json::object())});
  CHECK(a.status == 502);
}
