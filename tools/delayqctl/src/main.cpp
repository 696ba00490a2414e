// delayqctl: the admin CLI of delayq-server. It speaks the HTTP API of
// docs/server.md with the server's token and prints tables for people or the
// server's JSON for scripts (--json). Exit codes are listed in exit_code.
// One verb talks to a store instead of a server: migrate-shards, which moves
// a Redis store to the sharded layout of `delayq-server --cluster` while no
// server runs on it (delayq::migrate_to_shards()).

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ctl_format.hpp"
#include "delayq/error.hpp"
#include "delayq/open_store.hpp"
#include "delayq/redis_store.hpp"
#include "http_client.hpp"

namespace {

// ordered: tables show fields in the order the server sent them (stats).
using json = nlohmann::ordered_json;
using namespace delayq::ctl;

/// What the exit status says (documented in --help and docs/server.md).
enum exit_code : int {
  exit_ok = 0,
  exit_server_error = 1,  // the server answered another error
  exit_usage = 2,         // bad command line
  exit_not_found = 3,     // 404
  exit_conflict = 4,      // 409
  exit_unavailable = 5,   // cannot reach the server, timeout, or 503
  exit_unauthorized = 6,  // 401
  exit_full = 7,          // 429: the task type is full (--capacity)
};

constexpr const char* exit_codes_help =
    "Exit status: 0 ok; 1 the server answered an error; 2 usage error; 3 not found (404);\n"
    "4 conflict (409); 5 server unreachable, timeout or unavailable (503); 6 unauthorized (401);\n"
    "7 the task type is full (429). migrate-shards: 2 bad store URI or shard count;\n"
    "4 the store is sharded with another count, or a server still writes to it; 5 the store\n"
    "is unreachable.\n"
    "Durations: 500ms, 30s, 5m, 2h, 1d, or a plain number of milliseconds.";

struct globals {
  std::string server = "http://127.0.0.1:7700";
  std::string token;
  bool json_out = false;
  std::int64_t timeout_ms = 10'000;
  server_url url;
};

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads an integer field for a table; absent or another type shows as 0.
std::int64_t int_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<std::int64_t>() : 0;
}

std::string string_field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// A duration option: checked by CLI11, so a bad one is a usage error (exit 2).
CLI::Validator duration_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return parse_duration_ms(s) ? std::string{}
                                    : "'" + s +
                                          "' is not a duration (500ms, 30s, 5m, 2h, 1d or "
                                          "milliseconds)";
      },
      "DURATION");
}

/// One call to the server and how its answer becomes output and an exit code.
class client {
 public:
  explicit client(const globals& g) : g_(g) {}

  /// Sends the request; on success returns the parsed body (null for an
  /// empty one) and, with --json, prints the body verbatim. On failure prints
  /// `error: NAME: MESSAGE` to stderr and sets `exit` to the exit code.
  std::optional<json> call(std::string_view method, const std::string& target,
                           const std::optional<json>& body = std::nullopt, bool auth = true) {
    const http_result r =
        http_request(g_.url, method, target, auth ? g_.token : std::string{},
                     body ? std::optional<std::string>(body->dump()) : std::nullopt,
                     std::chrono::milliseconds{g_.timeout_ms});
    if (!r.reached) {
      std::cerr << "error: " << (r.timed_out ? "timeout" : "unreachable") << ": " << g_.server
                << ": " << r.failure << "\n";
      exit = exit_unavailable;
      return std::nullopt;
    }
    json parsed = json::parse(r.body, nullptr, false);
    if (r.status < 200 || r.status > 299) {
      std::string name = "http_" + std::to_string(r.status), message;
      if (parsed.is_object()) {
        if (parsed.contains("error"))
          name = string_field(parsed, "error");
        else if (parsed.contains("status"))
          name = string_field(parsed, "status");
        message = string_field(parsed, "message");
      } else {
        message = printable(r.body, 200);
      }
      std::cerr << "error: " << name << ": " << (message.empty() ? "(no message)" : message)
                << "\n";
      switch (r.status) {
        case 401: exit = exit_unauthorized; break;
        case 404: exit = exit_not_found; break;
        case 409: exit = exit_conflict; break;
        case 429: exit = exit_full; break;
        case 503: exit = exit_unavailable; break;
        default: exit = exit_server_error;
      }
      return std::nullopt;
    }
    if (g_.json_out && !r.body.empty()) std::cout << r.body << "\n";
    if (r.body.empty()) return json();
    if (parsed.is_discarded()) {
      std::cerr << "error: bad_response: the server's answer is not JSON\n";
      exit = exit_server_error;
      return std::nullopt;
    }
    return parsed;
  }

  /// Prints `text` unless --json (whose output is the body alone).
  void say(const std::string& text) const {
    if (!g_.json_out) std::cout << text;
  }
  bool json_out() const { return g_.json_out; }

  int exit = exit_ok;

 private:
  const globals& g_;
};

std::string task_path(const std::string& id) { return "/v1/tasks/" + percent_encode(id); }

// The `when` of add and reschedule: exactly one of --in and --at.
struct when_args {
  std::string in;
  std::int64_t at = 0;
  CLI::Option* in_opt = nullptr;
  CLI::Option* at_opt = nullptr;

  void add_to(CLI::App* cmd, const char* in_help) {
    auto* g = cmd->add_option_group("when", "exactly one of --in and --at");
    in_opt = g->add_option("--in", in, in_help)->check(duration_validator());
    at_opt = g->add_option("--at", at, "due time in milliseconds since the Unix epoch")
                 ->check(CLI::NonNegativeNumber);
    g->require_option(1);
  }
  void fill(json& j) const {
    if (*in_opt)
      j["delay_ms"] = *parse_duration_ms(in);
    else
      j["due_ms"] = at;
  }
};

void print_task(const client& c, const json& t) {
  const std::int64_t now = now_ms();
  std::vector<std::vector<std::string>> rows = {
      {"id", string_field(t, "id")},
      {"type", string_field(t, "type")},
      {"state", string_field(t, "state")},
      {"due", when_for_people(int_field(t, "due_ms"), now)},
      {"attempts", std::to_string(int_field(t, "attempts"))},
      {"payload", printable(string_field(t, "payload"))},
  };
  if (int_field(t, "trigger_count") > 0)
    rows.insert(rows.end() - 1, {"signals", std::to_string(int_field(t, "signals")) + " of " +
                                                std::to_string(int_field(t, "trigger_count"))});
  c.say(render_table(rows));
}

void print_task_list(const client& c, const json& tasks) {
  if (!tasks.is_array() || tasks.empty()) return c.say("no upcoming tasks\n");
  const std::int64_t now = now_ms();
  std::vector<std::vector<std::string>> rows = {{"ID", "TYPE", "DUE", "ATTEMPTS", "PAYLOAD"}};
  for (const json& t : tasks) {
    rows.push_back({printable(string_field(t, "id"), 40), printable(string_field(t, "type"), 30),
                    when_for_people(int_field(t, "due_ms"), now),
                    std::to_string(int_field(t, "attempts")),
                    printable(string_field(t, "payload"), 40)});
  }
  c.say(render_table(rows));
}

void print_dead(const client& c, const json& j) {
  const json& dead = j.contains("dead") ? j["dead"] : json::array();
  const std::int64_t total = int_field(j, "total");
  if (!dead.is_array() || dead.empty()) {
    return c.say("no dead letters" +
                 (total > 0 ? " on this page (" + std::to_string(total) + " in all)" : "") + "\n");
  }
  const std::int64_t now = now_ms();
  std::vector<std::vector<std::string>> rows = {
      {"ID", "TYPE", "ATTEMPTS", "DIED", "ERROR", "PAYLOAD"}};
  for (const json& d : dead) {
    rows.push_back(
        {printable(string_field(d, "id"), 40), printable(string_field(d, "type"), 30),
         std::to_string(int_field(d, "attempts")), when_for_people(int_field(d, "died_ms"), now),
         printable(string_field(d, "error"), 40), printable(string_field(d, "payload"), 40)});
  }
  c.say(render_table(rows));
  c.say(std::to_string(dead.size()) + " shown of " + std::to_string(total) + " dead letters\n");
}

void print_stats(const client& c, const json& j) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) {
      for (const auto& [sub, v] : value.items())
        rows.push_back({key + "." + sub, v.is_string() ? v.get<std::string>() : v.dump()});
    } else {
      rows.push_back({key, value.is_string() ? value.get<std::string>() : value.dump()});
    }
  }
  c.say(render_table(rows));
}

void print_types(const client& c, const json& j) {
  const json& types = j.contains("types") ? j["types"] : json::object();
  if (!types.is_object() || types.empty())
    return c.say("no push targets (every type is pulled by consumers)\n");
  std::vector<std::vector<std::string>> rows = {{"TYPE", "PUSH_URL", "TIMEOUT_MS", "CONCURRENCY"}};
  for (const auto& [type, t] : types.items()) {
    rows.push_back({printable(type, 40), printable(string_field(t, "push_url")),
                    std::to_string(int_field(t, "timeout_ms")),
                    std::to_string(int_field(t, "concurrency"))});
  }
  c.say(render_table(rows));
}

// A schedule's "when", for a table: the cron expression and its zone, or
// the interval.
std::string schedule_when(const json& s) {
  if (s.contains("cron")) return string_field(s, "cron") + " (" + string_field(s, "timezone") + ")";
  return "every " + compact_span(int_field(s, "every_ms"));
}

void print_schedule(const client& c, const json& s) {
  const std::int64_t now = now_ms();
  std::vector<std::vector<std::string>> rows = {
      {"id", printable(string_field(s, "id"))},
      {"type", string_field(s, "type")},
      {"when", printable(schedule_when(s))},
  };
  if (s.contains("start_ms")) rows.push_back({"start", iso8601_utc(int_field(s, "start_ms"))});
  if (s.contains("end_ms")) rows.push_back({"end", iso8601_utc(int_field(s, "end_ms"))});
  rows.push_back({"missed", string_field(s, "missed")});
  rows.push_back({"payload", printable(string_field(s, "payload"))});
  const json next = s.contains("next_due_ms") ? s["next_due_ms"] : json::array();
  for (std::size_t i = 0; i < next.size(); ++i)
    rows.push_back({i == 0 ? "next runs" : "", when_for_people(next[i].get<std::int64_t>(), now)});
  if (next.empty()) rows.push_back({"next runs", "none (the schedule has ended)"});
  c.say(render_table(rows));
}

void print_schedules(const client& c, const json& j) {
  const json& all = j.contains("schedules") ? j["schedules"] : json::array();
  const std::int64_t total = int_field(j, "total");
  if (!all.is_array() || all.empty())
    return c.say("no schedules" +
                 (total > 0 ? " on this page (" + std::to_string(total) + " in all)" : "") + "\n");
  const std::int64_t now = now_ms();
  std::vector<std::vector<std::string>> rows = {{"ID", "TYPE", "WHEN", "NEXT RUN", "MISSED"}};
  for (const json& s : all) {
    const json next = s.contains("next_due_ms") ? s["next_due_ms"] : json::array();
    rows.push_back({printable(string_field(s, "id"), 40), printable(string_field(s, "type"), 30),
                    printable(schedule_when(s), 40),
                    next.empty() ? "-" : when_for_people(next[0].get<std::int64_t>(), now),
                    string_field(s, "missed")});
  }
  c.say(render_table(rows));
  c.say(std::to_string(all.size()) + " shown of " + std::to_string(total) + " schedules\n");
}

// migrate-shards: the store's tasks and dead letters into the sharded
// layout of `shards` shards (0: the URI's shards=N). Errors as the other
// verbs print them, with the exit code of the nearest HTTP case.
int migrate_shards(const client& c, const std::string& uri, std::uint32_t shards) {
  boost::system::error_code ec;
  std::string why;
  const delayq::redis_options parsed = delayq::redis_options::parse(uri, ec, &why);
  if (!ec && shards == 0) shards = parsed.shards;
  if (!ec && shards == 0) {
    std::cerr << "error: usage: give the cluster's shard count: --shards N (the N of "
                 "delayq-server --cluster --shards N)\n";
    return exit_usage;
  }
  const delayq::shard_migration moved =
      ec ? delayq::shard_migration{} : delayq::migrate_to_shards(uri, shards, ec, &why);
  if (ec) {
    using delayq::errc;
    std::string name = "store_error";
    int code = exit_server_error;
    if (ec == errc::invalid_store_uri || ec == errc::invalid_cluster_options) {
      name = ec == errc::invalid_store_uri ? "invalid_store_uri" : "invalid_shards";
      code = exit_usage;
    } else if (ec == errc::shard_mismatch || ec == errc::busy) {
      name = ec == errc::busy ? "store_busy" : "shard_mismatch";
      code = exit_conflict;
    } else if (ec == errc::store_unavailable || ec == errc::outcome_unknown) {
      name = ec == errc::store_unavailable ? "store_unavailable" : "outcome_unknown";
      code = exit_unavailable;
    }
    std::cerr << "error: " << name << ": " << (why.empty() ? ec.message() : why) << "\n";
    return code;
  }
  delayq::redis_options plain = parsed;
  plain.shards = 0;
  const std::string store = plain.describe();  // without the password
  if (c.json_out()) {
    std::cout << json{{"store", store},
                      {"shards", moved.shards},
                      {"tasks", moved.tasks},
                      {"dead_letters", moved.dead_letters}}
                     .dump()
              << "\n";
    return exit_ok;
  }
  const std::string n = std::to_string(moved.shards);
  if (moved.tasks == 0 && moved.dead_letters == 0)
    c.say("nothing to move: " + store + " is in the sharded layout (" + n + " shards)\n");
  else
    c.say("moved " + std::to_string(moved.tasks) +
          (moved.tasks == 1 ? " task and " : " tasks and ") + std::to_string(moved.dead_letters) +
          (moved.dead_letters == 1 ? " dead letter of " : " dead letters of ") + store +
          " into its sharded layout (" + n + " shards)\n");
  c.say("delayq-server --cluster --shards " + n + " can start on it now\n");
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  globals g;
  if (const char* env = std::getenv("DELAYQ_SERVER"); env != nullptr && *env != '\0')
    g.server = env;
  if (const char* env = std::getenv("DELAYQ_TOKEN"); env != nullptr) g.token = env;

  CLI::App app{"delayqctl: look at and act on a delayq-server (docs/server.md)", "delayqctl"};
  app.set_version_flag("--version", std::string("delayqctl ") + DELAYQ_VERSION);
  app.footer(exit_codes_help);
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the verb: `delayqctl get X --json`
  app.add_option("--server", g.server,
                 "server URL, http://HOST:PORT[/PREFIX] (default: $DELAYQ_SERVER, else "
                 "http://127.0.0.1:7700)");
  app.add_option("--token", g.token, "bearer token (default: $DELAYQ_TOKEN)");
  app.add_flag("--json", g.json_out, "print the server's JSON answer as is (for scripts)");
  app.add_option("--timeout", g.timeout_ms, "give up after this many milliseconds")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{86'400'000}));

  // Verbs. Each sets `run` to what it does once everything is parsed.
  std::function<int(client&)> run;
  std::string id, type, payload, conflict, url, in_text = "0s";
  std::optional<std::string> new_id;
  std::optional<std::int64_t> limit, offset, push_timeout, push_concurrency, trigger;
  std::int64_t signal_n = 1;
  when_args add_when, resched_when;

  auto* stats = app.add_subcommand("stats", "the engine's and the server's counters");
  stats->callback([&] {
    run = [](client& c) {
      auto j = c.call("GET", "/v1/stats");
      if (j) print_stats(c, *j);
      return c.exit;
    };
  });

  auto* get = app.add_subcommand("get", "one pending task: state, due time, attempts, payload");
  get->add_option("ID", id, "task id")->required();
  get->callback([&] {
    run = [&](client& c) {
      auto j = c.call("GET", task_path(id));
      if (j) print_task(c, *j);
      return c.exit;
    };
  });

  auto* add = app.add_subcommand("add", "schedule a task; prints its id");
  add->add_option("TYPE", type, "task type")->required();
  add->add_option("PAYLOAD", payload, "payload (a string; send JSON as text)")->required();
  add_when.add_to(add, "run after this long (e.g. 30s)");
  add->add_option("--id", new_id, "the task's id (default: the server makes one)");
  add->add_option("--conflict", conflict,
                  "when --id is pending already: reject (exit 4), "
                  "replace it, or keep it")
      ->check(CLI::IsMember({"reject", "replace", "keep"}));
  add->add_option("--trigger", trigger,
                  "run after N signals (delayqctl signal) or at the due time, whichever is first")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000}));
  add->callback([&] {
    run = [&](client& c) {
      json body = {{"type", type}, {"payload", payload}};
      add_when.fill(body);
      if (new_id) body["id"] = *new_id;
      if (trigger) body["trigger_count"] = *trigger;
      if (!conflict.empty()) body["conflict"] = conflict;
      auto j = c.call("POST", "/v1/tasks", body);
      if (j) c.say(string_field(*j, "id") + "\n");
      return c.exit;
    };
  });

  auto* cancel = app.add_subcommand("cancel", "cancel a pending task (exit 4 if it is running)");
  cancel->add_option("ID", id, "task id")->required();
  cancel->callback([&] {
    run = [&](client& c) {
      if (c.call("DELETE", task_path(id))) c.say("cancelled " + printable(id) + "\n");
      return c.exit;
    };
  });

  auto* resched = app.add_subcommand("reschedule", "move a pending task's due time");
  resched->add_option("ID", id, "task id")->required();
  resched_when.add_to(resched, "run this long from now (e.g. 5m)");
  resched->callback([&] {
    run = [&](client& c) {
      json body = json::object();
      resched_when.fill(body);
      if (c.call("POST", task_path(id) + "/reschedule", body))
        c.say("rescheduled " + printable(id) + "\n");
      return c.exit;
    };
  });

  auto* signal_cmd = app.add_subcommand(
      "signal", "signal a count-triggered task (exit 3 unknown, 4 triggered already)");
  signal_cmd->add_option("ID", id, "task id")->required();
  signal_cmd->add_option("--n", signal_n, "signals to add")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000}));
  signal_cmd->callback([&] {
    run = [&](client& c) {
      json body = {{"n", signal_n}};
      auto j = c.call("POST", task_path(id) + "/signal", body);
      if (j) {
        const bool fired = j->value("triggered", false);
        c.say(printable(id) + ": " + std::to_string(int_field(*j, "signals")) + " of " +
              std::to_string(int_field(*j, "trigger_count")) + " signals" +
              (fired ? ", triggered: it runs now" : "") + "\n");
      }
      return c.exit;
    };
  });

  auto* upcoming = app.add_subcommand("upcoming", "the next tasks due, earliest first");
  upcoming->add_option("--type", type, "only this type");
  upcoming->add_option("--limit", limit, "at most this many (server default 20, max 1000)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000}));
  upcoming->callback([&] {
    run = [&](client& c) {
      std::string target = "/v1/upcoming";
      char sep = '?';
      if (!type.empty())
        target += std::exchange(sep, '&') + std::string("type=") + percent_encode(type);
      if (limit) target += sep + std::string("limit=") + std::to_string(*limit);
      auto j = c.call("GET", target);
      if (j) print_task_list(c, j->contains("tasks") ? (*j)["tasks"] : json::array());
      return c.exit;
    };
  });

  auto* dead = app.add_subcommand("dead", "dead letters: list, requeue, purge");
  dead->require_subcommand(1);
  auto* dead_list = dead->add_subcommand("list", "a page of dead letters");
  dead_list->add_option("--offset", offset, "skip this many")->check(CLI::NonNegativeNumber);
  dead_list->add_option("--limit", limit, "at most this many (server default 100, max 1000)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000}));
  dead_list->callback([&] {
    run = [&](client& c) {
      std::string target = "/v1/dead";
      char sep = '?';
      if (offset)
        target += std::exchange(sep, '&') + std::string("offset=") + std::to_string(*offset);
      if (limit) target += sep + std::string("limit=") + std::to_string(*limit);
      auto j = c.call("GET", target);
      if (j) print_dead(c, *j);
      return c.exit;
    };
  });
  auto* dead_requeue =
      dead->add_subcommand("requeue", "run a dead letter again (its attempts reset)");
  dead_requeue->add_option("ID", id, "task id")->required();
  dead_requeue->add_option("--in", in_text, "run after this long")
      ->capture_default_str()
      ->check(duration_validator());
  dead_requeue->callback([&] {
    run = [&](client& c) {
      json body = {{"delay_ms", *parse_duration_ms(in_text)}};
      if (c.call("POST", "/v1/dead/" + percent_encode(id) + "/requeue", body))
        c.say("requeued " + printable(id) + "\n");
      return c.exit;
    };
  });
  auto* dead_purge = dead->add_subcommand("purge", "delete a dead letter for good");
  dead_purge->add_option("ID", id, "task id")->required();
  dead_purge->callback([&] {
    run = [&](client& c) {
      if (c.call("DELETE", "/v1/dead/" + percent_encode(id)))
        c.say("purged " + printable(id) + "\n");
      return c.exit;
    };
  });

  // schedules list|get|put|rm: recurring schedules (docs/schedules.md).
  std::string cron, tz, every_text, missed, ttr_text;
  std::optional<std::int64_t> start_ms, end_ms, priority, next_n;
  auto schedule_path = [&] { return "/v1/schedules/" + percent_encode(id); };
  auto* sched = app.add_subcommand("schedules", "recurring schedules: list, get, put, rm");
  sched->require_subcommand(1);
  auto* sched_list = sched->add_subcommand("list", "a page of schedules, with their next run");
  sched_list->add_option("--offset", offset, "skip this many (at most 10000)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{10'000}));
  sched_list->add_option("--limit", limit, "at most this many (server default 100, max 1000)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000}));
  sched_list->callback([&] {
    run = [&](client& c) {
      std::string target = "/v1/schedules?next=1";
      if (offset) target += "&offset=" + std::to_string(*offset);
      if (limit) target += "&limit=" + std::to_string(*limit);
      auto j = c.call("GET", target);
      if (j) print_schedules(c, *j);
      return c.exit;
    };
  });
  auto* sched_get = sched->add_subcommand("get", "one schedule and its next runs");
  sched_get->add_option("ID", id, "schedule id")->required();
  sched_get->add_option("--next", next_n, "how many next runs (server default 10, max 1000)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000}));
  sched_get->callback([&] {
    run = [&](client& c) {
      auto j = c.call("GET", schedule_path() + (next_n ? "?next=" + std::to_string(*next_n) : ""));
      if (j) print_schedule(c, *j);
      return c.exit;
    };
  });
  auto* sched_put = sched->add_subcommand(
      "put", "create or replace a schedule: its occurrences become tasks ID@MS");
  sched_put->add_option("ID", id, "schedule id")->required();
  sched_put->add_option("TYPE", type, "the task type of its occurrences")->required();
  auto* when = sched_put->add_option_group("when", "exactly one of --cron and --every");
  when->add_option("--cron", cron,
                   "cron expression: 5 fields, or 6 with seconds first, or @hourly @daily ...");
  when->add_option("--every", every_text, "a fixed interval (at least 1s)")
      ->check(duration_validator());
  when->require_option(1);
  sched_put->add_option("--tz", tz, "IANA time zone the cron expression is read in (default UTC)");
  sched_put->add_option("--payload", payload, "the payload of every occurrence");
  sched_put->add_option("--start", start_ms, "no run before, ms since the Unix epoch")
      ->check(CLI::NonNegativeNumber);
  sched_put->add_option("--end", end_ms, "no run after, ms since the Unix epoch")
      ->check(CLI::NonNegativeNumber);
  sched_put->add_option("--missed", missed, "runs missed while no instance ran: skip, once, all")
      ->check(CLI::IsMember({"skip", "once", "all"}));
  sched_put->add_option("--priority", priority, "task priority (lower first)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{4294967295}));
  sched_put->add_option("--ttr", ttr_text, "a consumer's lease on each occurrence")
      ->check(duration_validator());
  sched_put->callback([&] {
    run = [&](client& c) {
      json body = {{"type", type}, {"payload", payload}};
      if (!cron.empty()) body["cron"] = cron;
      if (!every_text.empty()) body["every_ms"] = *parse_duration_ms(every_text);
      if (!tz.empty()) body["timezone"] = tz;
      if (start_ms) body["start_ms"] = *start_ms;
      if (end_ms) body["end_ms"] = *end_ms;
      if (!missed.empty()) body["missed"] = missed;
      if (priority) body["priority"] = *priority;
      if (!ttr_text.empty()) body["ttr_ms"] = *parse_duration_ms(ttr_text);
      auto j = c.call("PUT", schedule_path(), body);
      if (j) {
        const json next = j->contains("next_due_ms") ? (*j)["next_due_ms"] : json::array();
        c.say("schedule " + printable(id) + " stored" +
              (next.empty()
                   ? ", with no run to come"
                   : "; next run " + when_for_people(next[0].get<std::int64_t>(), now_ms())) +
              "\n");
      }
      return c.exit;
    };
  });
  auto* sched_rm = sched->add_subcommand(
      "rm", "remove a schedule (its occurrences made tasks ahead of time are cancelled)");
  sched_rm->add_option("ID", id, "schedule id")->required();
  sched_rm->callback([&] {
    run = [&](client& c) {
      if (c.call("DELETE", schedule_path())) c.say("removed schedule " + printable(id) + "\n");
      return c.exit;
    };
  });

  auto* types = app.add_subcommand("types", "the push targets (types not listed are pulled)");
  types->callback([&] {
    run = [](client& c) {
      auto j = c.call("GET", "/v1/types");
      if (j) print_types(c, *j);
      return c.exit;
    };
  });

  auto* type_cmd = app.add_subcommand("type", "set or remove a type's push target");
  type_cmd->require_subcommand(1);
  auto* type_set = type_cmd->add_subcommand("set", "push the type's due tasks to URL");
  type_set->add_option("TYPE", type, "task type")->required();
  type_set->add_option("URL", url, "http:// URL the tasks are POSTed to")->required();
  type_set->add_option("--timeout-ms", push_timeout, "per push (server default 10000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{600'000}));
  type_set
      ->add_option("--concurrency", push_concurrency,
                   "pushes in flight at most (server default 64)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{10'000}));
  type_set->callback([&] {
    run = [&](client& c) {
      json body = {{"push_url", url}};
      if (push_timeout) body["timeout_ms"] = *push_timeout;
      if (push_concurrency) body["concurrency"] = *push_concurrency;
      if (c.call("PUT", "/v1/types/" + percent_encode(type), body))
        c.say("type " + printable(type) + " pushes to " + printable(url) + "\n");
      return c.exit;
    };
  });
  auto* type_rm = type_cmd->add_subcommand("rm", "remove the push target (the type is pulled)");
  type_rm->add_option("TYPE", type, "task type")->required();
  type_rm->callback([&] {
    run = [&](client& c) {
      if (c.call("DELETE", "/v1/types/" + percent_encode(type)))
        c.say("type " + printable(type) + " is pulled again\n");
      return c.exit;
    };
  });

  auto* health =
      app.add_subcommand("health", "is the server up and its store reachable (no token)");
  health->callback([&] {
    run = [](client& c) {
      auto j = c.call("GET", "/healthz", std::nullopt, false);
      if (j) c.say(string_field(*j, "status") + "\n");
      return c.exit;
    };
  });

  std::string store_uri;
  std::uint32_t migrate_to = 0;
  auto* migrate = app.add_subcommand(
      "migrate-shards",
      "move a Redis store's tasks and dead letters into the sharded layout of delayq-server "
      "--cluster (talks to the store, not to a server: stop the servers on it first)");
  migrate
      ->add_option("--store", store_uri,
                   "the store: redis://, unix:// or redis-cluster:// URI (default: "
                   "$DELAYQ_STORE)")
      ->envname("DELAYQ_STORE")
      ->required();
  migrate
      ->add_option("--shards", migrate_to,
                   "the cluster's shard count, as given to delayq-server --shards (needed "
                   "unless the URI says shards=N)")
      ->check(CLI::Range(1u, 16384u));
  migrate->callback(
      [&] { run = [&](client& c) { return migrate_shards(c, store_uri, migrate_to); }; });

  // Every verb shows the global options and the exit codes in its --help too.
  for (CLI::App* sub :
       {stats,     get,          add,        cancel,  resched,    signal_cmd, upcoming,  dead,
        dead_list, dead_requeue, dead_purge, sched,   sched_list, sched_get,  sched_put, sched_rm,
        types,     type_cmd,     type_set,   type_rm, health,     migrate})
    sub->footer(std::string("Global options (before or after the verb): --server URL, --token T, "
                            "--json, --timeout MS;\nsee delayqctl --help.\n") +
                exit_codes_help);

  try {
    app.parse(argc, argv);
    std::string why;
    auto parsed = server_url::parse(g.server, why);
    if (!parsed) throw CLI::ValidationError("--server", why);
    g.url = std::move(*parsed);
  } catch (const CLI::ParseError& e) {
    // CLI11 exits 0 for --help and --version and 100+ for its errors; every
    // command-line error is exit 2 here.
    const int code = app.exit(e);
    return code == 0 ? exit_ok : exit_usage;
  }
  if (!run) return exit_usage;  // unreachable: require_subcommand(1)
  client c(g);
  return run(c);
}
