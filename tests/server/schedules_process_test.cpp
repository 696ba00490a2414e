// delayq-server process tests of recurring schedules (docs/server.md,
// "Schedules"): PUT, GET, list and DELETE; bad input refused with 400 naming
// the field, and nothing stored; occurrences handed to consumers as ordinary
// tasks "ID@MS". On Redis and on SQLite.
#include <doctest/doctest.h>

#include <set>

#include "push_receiver.hpp"

namespace {

using namespace delayq::server_test;

std::string schedule_path(std::string_view id) { return "/v1/schedules/" + path_escape(id); }

}  // namespace

TEST_CASE("server: schedules: put, get, list and delete") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("report");
  const json body{{"type", type},          {"payload", "weekly"},
                  {"cron", "0 9 * * MON"}, {"timezone", "Europe/Berlin"},
                  {"missed", "once"},      {"priority", 3},
                  {"ttr_ms", 60000}};
  auto r = c.put(schedule_path("weekly:report/de"), body);
  REQUIRE_MESSAGE(r.status == 201, r.describe());  // created
  CHECK(r.body_json["id"] == "weekly:report/de");
  CHECK(r.body_json["cron"] == "0 9 * * MON");
  CHECK(r.body_json["timezone"] == "Europe/Berlin");
  CHECK(r.body_json["missed"] == "once");
  CHECK(r.body_json["priority"] == 3);
  CHECK(r.body_json["ttr_ms"] == 60000);
  CHECK(r.body_json["conflict"] == "keep");
  r = c.put(schedule_path("weekly:report/de"), body);
  CHECK_MESSAGE(r.status == 200, r.describe());  // the same again

  auto g = c.get(schedule_path("weekly:report/de"));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["payload"] == "weekly");
  REQUIRE(g.body_json["next_due_ms"].is_array());
  CHECK(g.body_json["next_due_ms"].size() == 10);  // the default
  const auto first = g.body_json["next_due_ms"][0].get<std::int64_t>();
  CHECK(first > now_ms());
  CHECK(g.body_json["next_due_ms"][1].get<std::int64_t>() - first >= 7LL * 86400000 - 3600000);
  g = c.get(schedule_path("weekly:report/de") + "?next=1000");
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["next_due_ms"].size() == 1000);
  g = c.get(schedule_path("weekly:report/de") + "?next=0");
  CHECK(g.body_json["next_due_ms"].empty());
  for (const char* bad : {"?next=1001", "?next=-1", "?next=x"}) {
    auto b = c.get(schedule_path("weekly:report/de") + bad);
    CHECK_MESSAGE(b.status == 400, b.describe());
  }
  CHECK(c.get(schedule_path("nope")).status == 404);

  // Every 1 h since the epoch: on the hour, UTC.
  r = c.put(schedule_path("hourly"), json{{"type", type}, {"every_ms", 3600000}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(r.body_json["every_ms"] == 3600000);
  CHECK_FALSE(r.body_json.contains("timezone"));
  CHECK(r.body_json["next_due_ms"][0].get<std::int64_t>() % 3600000 == 0);

  auto l = c.get("/v1/schedules");
  REQUIRE_MESSAGE(l.status == 200, l.describe());
  CHECK(l.body_json["total"] == 2);
  REQUIRE(l.body_json["schedules"].size() == 2);
  CHECK(l.body_json["schedules"][0]["id"] == "hourly");  // id order
  CHECK(l.body_json["schedules"][1]["next_due_ms"].size() == 3);
  l = c.get("/v1/schedules?offset=1&limit=1&next=0");
  REQUIRE_MESSAGE(l.status == 200, l.describe());
  REQUIRE(l.body_json["schedules"].size() == 1);
  CHECK(l.body_json["schedules"][0]["id"] == "weekly:report/de");
  for (const char* bad : {"?offset=10001", "?limit=1001", "?next=11"})
    CHECK(c.get(std::string("/v1/schedules") + bad).status == 400);

  CHECK(c.del(schedule_path("hourly")).status == 204);
  CHECK(c.del(schedule_path("hourly")).status == 404);
  CHECK(c.get(schedule_path("hourly")).status == 404);

  // Survives a restart.
  server = server_process::start(store);
  http_client c2(server->port());
  g = c2.get(schedule_path("weekly:report/de"));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["cron"] == "0 9 * * MON");
}

TEST_CASE("server: schedules: bad input is 400 naming the field, and nothing is stored") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  struct bad_case {
    json body;
    const char* error;
    const char* field;  // nullptr: a bad_request about the body's form
    const char* says;
  };
  const std::vector<bad_case> cases{
      {{{"type", "t"}, {"cron", "61 * * * *"}}, "invalid_schedule", "cron", "minute field '61'"},
      {{{"type", "t"}, {"cron", "0 0 30 2 *"}}, "invalid_schedule", "cron", "never matches"},
      {{{"type", "t"}, {"cron", "0 0 L * *"}}, "invalid_schedule", "cron", "not supported"},
      {{{"type", "t"}, {"cron", "@daily"}, {"timezone", "Europe/Nowhere"}},
       "invalid_schedule",
       "timezone",
       "Europe/Nowhere"},
      {{{"type", "t"}, {"every_ms", 999}}, "invalid_schedule", "every_ms", "1000"},
      {{{"type", "t"}, {"every_ms", 1000}, {"timezone", "UTC"}},
       "invalid_schedule",
       "timezone",
       "cron only"},
      {{{"type", "t"}}, "invalid_schedule", "cron", "either cron or every_ms"},
      {{{"type", "t"}, {"cron", "@daily"}, {"every_ms", 1000}},
       "invalid_schedule",
       "every_ms",
       "not both"},
      {{{"type", "t"}, {"cron", "@daily"}, {"start_ms", 2000}, {"end_ms", 1000}},
       "invalid_schedule",
       "end_ms",
       "before start_ms"},
      {{{"type", "t"}, {"cron", "@daily"}, {"start_ms", -5}}, "invalid_schedule", "start_ms", "0"},
      // Past what a time point holds (the fuzzer's 2530), and past 2262-01-01.
      {{{"type", "t"}, {"every_ms", 60000}, {"start_ms", 17672256000000}},
       "invalid_schedule",
       "start_ms",
       "2262"},
      {{{"type", "t"}, {"cron", "@daily"}, {"end_ms", 9214646400001}},
       "invalid_schedule",
       "end_ms",
       "2262"},
      {{{"type", "bad type"}, {"cron", "@daily"}}, "invalid_schedule", "type", "A-Za-z0-9"},
      {{{"type", "t"}, {"cron", "@daily"}, {"missed", "sometimes"}},
       "bad_request",
       nullptr,
       "\"missed\""},
      {{{"type", "t"}, {"cron", "@daily"}, {"ttr_ms", 5}}, "bad_request", nullptr, "\"ttr_ms\""},
      {{{"type", "t"}, {"cron", 5}}, "bad_request", nullptr, "\"cron\" must be a string"},
      {{{"cron", "@daily"}}, "bad_request", nullptr, "missing field \"type\""},
      {{{"type", "t"}, {"cron", "@daily"}, {"tz", "UTC"}},
       "bad_request",
       nullptr,
       "unknown field \"tz\""},
  };
  for (const bad_case& b : cases) {
    INFO(b.body.dump());
    auto r = c.put(schedule_path("s"), b.body);
    CHECK_MESSAGE(r.status == 400, r.describe());
    CHECK(r.error() == b.error);
    CHECK_MESSAGE(str(r.body_json, "message").find(b.says) != std::string::npos, r.describe());
    if (b.field) CHECK(r.body_json["field"] == b.field);
  }
  auto r = c.put(schedule_path(std::string(241, 'x')), json{{"type", "t"}, {"cron", "@daily"}});
  CHECK(r.status == 400);
  CHECK(r.body_json["field"] == "id");
  // Nothing of it was stored.
  CHECK(c.get(schedule_path("s")).status == 404);
  auto l = c.get("/v1/schedules");
  CHECK(l.body_json["total"] == 0);
}

TEST_CASE("server: schedules: each occurrence is a task a consumer reserves, once") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("tick");
  auto r =
      c.put(schedule_path("ticker"), json{{"type", type}, {"payload", "p"}, {"every_ms", 1000}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  std::set<std::string> seen;
  std::int64_t last = 0;
  while (seen.size() < 3) {
    json t = reserve_one(c, {type});
    REQUIRE(t.is_object());
    const std::string id = t["id"];
    CHECK(id.starts_with("ticker@"));
    const std::int64_t ms = std::stoll(id.substr(7));
    CHECK(t["due_ms"] == ms);
    CHECK(ms % 1000 == 0);
    CHECK(ms > last);  // in order, none twice
    last = ms;
    CHECK(seen.insert(id).second);
    CHECK(t["payload"] == "p");
    auto f = c.post(task_path(id) + "/finish", json{{"lease", t["lease"]}});
    CHECK_MESSAGE(f.status == 204, f.describe());
  }
  auto s = c.get("/v1/stats");
  CHECK(s.body_json["schedules"] == 1);
  CHECK(s.body_json["occurrences_made"].get<std::int64_t>() >= 3);
}
