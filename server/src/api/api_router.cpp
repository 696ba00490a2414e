#include "api/api_router.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/beast/http/verb.hpp>
#include <mutex>
#include <optional>
#include <thread>

#include "api/api_call.hpp"
#include "api/batch_split.hpp"
#include "api/request_guard.hpp"
#include "pull/task_chase.hpp"
#include "web/openapi_document.hpp"
#include "web/static_files.hpp"
#include "wire/dump_json.hpp"
#include "wire/http_url.hpp"
#include "wire/request_codec.hpp"
#include "wire/task_json.hpp"

namespace delayq::server {
namespace {

namespace bhttp = boost::beast::http;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::system_clock;

const char* state_name(task_state s) {
  switch (s) {
    case task_state::delayed: return "delayed";
    case task_state::ready: return "ready";
    case task_state::running: return "running";
  }
  return "running";
}

// How long a cancel or reschedule chases a task that the engine keeps
// handing to the broker between our two steps (give back, then act), and
// how long it waits for a task the engine runs to reach the broker
// (pull/task_chase.hpp). Both hold one of the blocking threads meanwhile,
// polling.
constexpr std::chrono::seconds chase_patience{5};
constexpr std::chrono::seconds transit_patience{2};

}  // namespace

http_answer json_answer(unsigned status, const json& body) {
  http_answer a;
  a.status = status;
  a.body = dump_json(body);
  return a;
}

http_answer error_answer(const api_error& e) {
  http_answer a = json_answer(e.status, json{{"error", e.name}, {"message", e.message}});
  if (e.status == 503) a.headers.emplace_back("Retry-After", "1");
  return a;
}

api_router::api_router(api_parts parts, std::size_t blocking_threads)
    : parts_(std::move(parts)), pool_(blocking_threads), settings_(pool_.get_executor()) {
  if (parts_.forwarder != nullptr && parts_.peers != nullptr)
    forwarding_ = std::make_unique<call_forwarder>(*parts_.peers, *parts_.forwarder, pool_,
                                                   parts_.forwarding);
}

api_router::~api_router() { join(); }

void api_router::join() { pool_.join(); }

namespace {

// Whether a JSON body may set "wait_ms" to anything but 0 (absent: 0, answer
// at once). A scan, not a parse (the handler parses): every "wait_ms"
// followed by a colon must hold exactly 0 for a no. Unsure is a yes, which
// only costs a watch that was not needed.
bool may_wait(std::string_view body) {
  constexpr std::string_view key = "\"wait_ms\"";
  const auto space = [&](std::size_t i) {
    while (i < body.size() &&
           (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
      ++i;
    return i;
  };
  for (std::size_t at = body.find(key); at != std::string_view::npos;
       at = body.find(key, at + key.size())) {
    std::size_t i = space(at + key.size());
    if (i >= body.size() || body[i] != ':') continue;  // a string value, not the key
    i = space(i + 1);
    if (i >= body.size() || body[i] != '0') return true;
    i = space(i + 1);
    if (i < body.size() && body[i] != ',' && body[i] != '}') return true;  // 0.5, 01, 0e3
  }
  return false;
}

}  // namespace

bool api_router::is_long_poll(const http_request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  if (req.method() != bhttp::verb::post) return false;
  // A reserve, or a finish or fail that reserves next, waits only when its
  // wait_ms says so; one that answers at once needs no watch for a client
  // going away (an answer that cannot be written gives its tasks back, as
  // any answer does), and a watch costs a read and its cancel per request.
  const std::string_view body = req.body();
  if (target.starts_with("/v1/reserve")) return may_wait(body);
  return (target.ends_with("/finish") || target.ends_with("/fail") ||
          target == "/v1/tasks:finish") &&
         body.find("\"next\"") != std::string_view::npos && may_wait(body);
}

namespace {

// fn()'s answer, or 500 when it threw: a bug, not the client's fault, and
// an exception escaping a pool thread would end the process.
http_answer answer_of(const std::function<http_answer()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return error_answer({500, "internal_error", e.what()});
  }
}

}  // namespace

void api_router::blocking(http_respond respond, std::function<http_answer()> fn) {
  boost::asio::post(pool_,
                    [respond = std::move(respond), fn = std::move(fn)] { respond(answer_of(fn)); });
}

void api_router::settings(http_respond respond, std::function<http_answer()> fn) {
  boost::asio::post(settings_,
                    [respond = std::move(respond), fn = std::move(fn)] { respond(answer_of(fn)); });
}

void api_router::handle(http_request&& req, http_respond respond,
                        std::shared_ptr<http_gone_signal> gone) {
  call c;
  c.req = std::move(req);
  c.respond = std::move(respond);
  c.gone = std::move(gone);
  const std::string_view target(c.req.target().data(), c.req.target().size());
  const std::size_t q = target.find('?');
  c.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) c.query = std::string(target.substr(q + 1));
  if (c.path.empty() || c.path[0] != '/') return c.fail(bad_request("the target must be a path"));
  for (std::size_t i = 1; i <= c.path.size();) {
    const std::size_t slash = std::min(c.path.find('/', i), c.path.size());
    std::string s;
    if (!percent_decode(std::string_view(c.path).substr(i, slash - i), s))
      return c.fail(bad_request("malformed %-escape in the path"));
    c.seg.push_back(std::move(s));
    i = slash + 1;
  }
  try {
    route(c);
  } catch (const std::exception& e) {
    // A bug, not the client's fault; the server keeps serving.
    if (c.respond) c.answer(error_answer({500, "internal_error", e.what()}));
  }
}

// Every route of the API, in one table: route() dispatches through it, and
// `delayq-server --list-routes` prints it, so the tests that try every route
// (the token, the methods) cannot miss one. A `{name}` segment matches any
// one path segment, handed to the handler.
struct api_router::route_entry {
  bhttp::verb method;
  std::string_view pattern;
  void (*handle)(api_router& r, call& c, const std::string& arg);
};

const std::vector<api_router::route_entry>& api_router::route_table() {
  using v = bhttp::verb;
  static const std::vector<route_entry> table{
      {v::get, "/healthz", [](api_router& r, call& c, const std::string&) { r.healthz(c); }},
      {v::get, "/metrics", [](api_router& r, call& c, const std::string&) { r.metrics(c); }},
      // The dashboard's files (web/static_files.hpp): no token, the page asks for it.
      {v::get, "/",
       [](api_router&, call& c, const std::string&) { c.answer(web_file_answer("index.html")); }},
      {v::get, "/ui/{file}",
       [](api_router&, call& c, const std::string& file) { c.answer(web_file_answer(file)); }},
      {v::post, "/v1/tasks", [](api_router& r, call& c, const std::string&) { r.add_task(c); }},
      {v::post, "/v1/tasks:batch",
       [](api_router& r, call& c, const std::string&) { r.add_batch(c); }},
      {v::post, "/v1/tasks:finish",
       [](api_router& r, call& c, const std::string&) { r.finish_batch(c); }},
      {v::get, "/v1/tasks/{id}",
       [](api_router& r, call& c, const std::string& id) { r.get_task(c, id); }},
      {v::delete_, "/v1/tasks/{id}",
       [](api_router& r, call& c, const std::string& id) { r.cancel_task(c, id); }},
      {v::post, "/v1/tasks/{id}/reschedule",
       [](api_router& r, call& c, const std::string& id) { r.reschedule_task(c, id); }},
      {v::post, "/v1/tasks/{id}/signal",
       [](api_router& r, call& c, const std::string& id) { r.signal_task(c, id); }},
      {v::post, "/v1/tasks/{id}/finish",
       [](api_router& r, call& c, const std::string& id) { r.end_lease(c, id, "finish"); }},
      {v::post, "/v1/tasks/{id}/fail",
       [](api_router& r, call& c, const std::string& id) { r.end_lease(c, id, "fail"); }},
      {v::post, "/v1/tasks/{id}/touch",
       [](api_router& r, call& c, const std::string& id) { r.end_lease(c, id, "touch"); }},
      {v::post, "/v1/reserve", [](api_router& r, call& c, const std::string&) { r.reserve(c); }},
      {v::get, "/v1/types", [](api_router& r, call& c, const std::string&) { r.get_types(c); }},
      {v::put, "/v1/types/{type}",
       [](api_router& r, call& c, const std::string& type) { r.put_type(c, type); }},
      {v::get, "/v1/types/{type}",
       [](api_router& r, call& c, const std::string& type) { r.get_type(c, type); }},
      {v::delete_, "/v1/types/{type}",
       [](api_router& r, call& c, const std::string& type) { r.delete_type(c, type); }},
      {v::get, "/v1/dead", [](api_router& r, call& c, const std::string&) { r.list_dead(c); }},
      {v::delete_, "/v1/dead/{id}",
       [](api_router& r, call& c, const std::string& id) { r.purge_dead(c, id); }},
      {v::post, "/v1/dead/{id}/requeue",
       [](api_router& r, call& c, const std::string& id) { r.requeue_dead(c, id); }},
      {v::get, "/v1/stats", [](api_router& r, call& c, const std::string&) { r.stats(c); }},
      {v::get, "/v1/upcoming", [](api_router& r, call& c, const std::string&) { r.upcoming(c); }},
      // The API's own description (server/openapi/openapi.json), with the token like all of /v1/.
      {v::get, "/v1/openapi.json",
       [](api_router&, call& c, const std::string&) { c.answer(openapi_answer()); }},
      {v::get, "/v1/schedules",
       [](api_router& r, call& c, const std::string&) { r.list_schedules(c); }},
      {v::put, "/v1/schedules/{id}",
       [](api_router& r, call& c, const std::string& id) { r.put_schedule(c, id); }},
      {v::get, "/v1/schedules/{id}",
       [](api_router& r, call& c, const std::string& id) { r.get_schedule(c, id); }},
      {v::delete_, "/v1/schedules/{id}",
       [](api_router& r, call& c, const std::string& id) { r.delete_schedule(c, id); }},
  };
  return table;
}

std::vector<std::pair<std::string, std::string>> api_router::routes() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const route_entry& e : route_table())
    out.emplace_back(std::string(bhttp::to_string(e.method)), std::string(e.pattern));
  return out;
}

namespace {

// Whether the decoded segments `seg` of a path match `pattern`; `arg` gets
// the segment a `{name}` matched.
bool matches(std::string_view pattern, const std::vector<std::string>& seg, std::string& arg) {
  std::size_t k = 0;
  for (std::size_t i = 1; i <= pattern.size(); ++k) {
    const std::size_t slash = std::min(pattern.find('/', i), pattern.size());
    const std::string_view p = pattern.substr(i, slash - i);
    i = slash + 1;
    if (k >= seg.size()) return false;
    if (p.starts_with('{')) {
      if (seg[k].empty()) return false;
      arg = seg[k];
    } else if (p != seg[k]) {
      return false;
    }
  }
  return k == seg.size();
}

}  // namespace

void api_router::route(call& c) {
  // The HTTP layer asked request_guard already (before the body was read);
  // asked again here so that no route is reached without the token,
  // whatever calls handle().
  if (request_guard::needs_token(c.path) && parts_.guard != nullptr &&
      !parts_.guard->authorized(c.req.base()))
    return c.fail({401, "unauthorized", "missing or wrong Authorization: Bearer token"});
  bool path_known = false;
  std::string arg;
  for (const route_entry& e : route_table()) {
    if (!matches(e.pattern, c.seg, arg)) continue;
    path_known = true;
    if (e.method == c.req.method()) return e.handle(*this, c, arg);
  }
  if (path_known)
    return c.fail({405, "method_not_allowed",
                   std::string(c.req.method_string()) + " is not allowed on " + c.path});
  c.fail(not_found("no such path: " + c.path));
}

// ------------------------------------------------------------------ cluster

bool api_router::forward_foreign(call& c, const std::string& id,
                                 std::function<http_answer()> local) {
  if (!forwarding_) return false;
  return forward_to(c, parts_.engine->owner_of(id), id, std::move(local));
}

bool api_router::forward_to(call& c, std::string to, const std::string& id,
                            std::function<http_answer()> local) {
  // Forwarded here already: answer from here, whatever this instance
  // thinks, so that two instances that disagree on the owner during a
  // hand-over answer 421 instead of passing the call back and forth.
  if (!forwarding_ || parts_.forwarder->is_forwarded(c.req)) return false;
  if (to.empty() || to == forwarding_->instance()) return false;
  forwarding_->forward(std::move(to), std::move(c.req), id, std::exchange(c.respond, nullptr),
                       std::move(local));
  return true;
}

// ------------------------------------------------------------------ tasks

void api_router::add_task(call& c) {
  if (!c.parse_body()) return;
  add_request r;
  if (auto e = parse_add(c.body, r)) return c.fail(*e);
  // A task with an id is checked against the id's shard (a conflict with a
  // pending task): its owner decides.
  if (!r.id.empty() && forward_foreign(c, r.id)) return;
  schedule_options opts;
  opts.id = std::move(r.id);
  opts.conflict = r.conflict;
  opts.trigger_count = r.trigger_count;
  opts.priority = r.priority;
  opts.ttr = r.ttr;
  // Answered where the outcome is learnt (delayq::direct): here for an
  // in-process store, else from the store write's completion; 201 only once
  // durable, and a task due now is in the broker's ready order by then.
  const auto due = r.when.due(parts_.engine->now());
  // A replace's new version, which its pushes are not withdrawn for.
  std::optional<task> spare;
  if (r.conflict == on_conflict::replace) spare = task{{}, r.type, r.payload, due};
  parts_.engine->async_schedule_at(
      std::move(r.type), std::move(r.payload), due, std::move(opts),
      direct([respond = std::move(c.respond), broker = parts_.broker, pusher = parts_.pusher,
              spare = std::move(spare)](boost::system::error_code ec, std::string id) {
        // A replaced task that was due and waiting for a consumer, or for
        // its push to be written, is the old version: take it back so only
        // the new one is delivered.
        if (!ec && spare) {
          broker->release_ready(id);
          if (pusher) pusher->withdraw(id, &*spare);
        }
        respond(ec ? error_answer(from_error_code(ec)) : json_answer(201, json{{"id", id}}));
      }));
}

void api_router::add_batch(call& c) {
  if (!c.parse_body()) return;
  std::vector<add_request> rs;
  if (auto e = parse_batch(c.body, rs)) return c.fail(*e);
  // Under --cluster, tasks with ids are stored by their shards' owners:
  // a batch of one other owner goes there whole; one of several is split,
  // a part to each owner (tasks without an id are stored here), and
  // answered once (batch_split.hpp). A part forwarded here is stored here.
  if (forwarding_ && !parts_.forwarder->is_forwarded(c.req)) {
    auto parts = split_batch(
        rs, [this](const std::string& id) { return parts_.engine->owner_of(id); },
        forwarding_->instance());
    if (parts.size() == 1 && !parts[0].instance.empty() &&
        forward_to(c, parts[0].instance, first_named_id(rs, parts[0])))
      return;
    if (parts.size() > 1) return split_batch_call(c, std::move(rs), std::move(parts));
  }
  blocking(std::move(c.respond),
           [this, rs = std::move(rs)]() mutable { return store_batch(std::move(rs)); });
}

void api_router::split_batch_call(call& c, std::vector<add_request> rs,
                                  std::vector<batch_part> parts) {
  // The parts' answers, gathered on whichever thread each arrives.
  struct gather {
    std::mutex mutex;
    std::size_t total = 0;
    std::vector<batch_part> parts;
    std::vector<http_answer> answers;
    std::size_t left = 0;
    http_respond respond;
  };
  auto g = std::make_shared<gather>();
  g->total = rs.size();
  g->answers.resize(parts.size());
  g->left = parts.size();
  g->respond = std::move(c.respond);
  const auto answered = [g](std::size_t k) {
    return [g, k](http_answer a) {
      std::unique_lock lock(g->mutex);
      g->answers[k] = std::move(a);
      if (--g->left > 0) return;
      http_answer out = join_batch_answers(g->total, g->parts, g->answers);
      lock.unlock();
      std::exchange(g->respond, nullptr)(std::move(out));
    };
  };
  const json& tasks = c.body["tasks"];
  // Only read from here on (the loop below and the last answer alike).
  g->parts = std::move(parts);
  for (std::size_t k = 0; k < g->parts.size(); ++k) {
    const batch_part& part = g->parts[k];
    if (part.instance.empty()) {
      std::vector<add_request> here;
      for (const std::size_t i : part.index) here.push_back(std::move(rs[i]));
      blocking(answered(k),
               [this, here = std::move(here)]() mutable { return store_batch(std::move(here)); });
      continue;
    }
    // The owner's part as a batch of its own, with the caller's token.
    json sub = json::array();
    for (const std::size_t i : part.index) sub.push_back(tasks[i]);
    forwarding_->forward(part.instance,
                         sub_call(c.req, "/v1/tasks:batch", json{{"tasks", std::move(sub)}}),
                         first_named_id(rs, part), answered(k), nullptr);
  }
}

http_answer api_router::store_batch(std::vector<add_request> rs) {
  std::vector<task_spec> specs;
  specs.reserve(rs.size());
  const auto now = parts_.engine->now();
  std::vector<task> replaced;  // the new versions of the ids replaced
  for (add_request& r : rs) {
    if (r.conflict == on_conflict::replace && !r.id.empty())
      replaced.push_back(task{r.id, r.type, r.payload, r.when.due(now)});
    task_spec t;
    t.type = std::move(r.type);
    t.payload = std::move(r.payload);
    t.due = r.when.due(now);
    t.options.id = std::move(r.id);
    t.options.conflict = r.conflict;
    t.options.trigger_count = r.trigger_count;
    t.options.priority = r.priority;
    t.options.ttr = r.ttr;
    specs.push_back(std::move(t));
  }
  boost::system::error_code ec;
  std::size_t bad = 0;
  auto ids = parts_.engine->schedule_many(std::move(specs), ec, bad);
  if (ec) {
    api_error e = from_error_code(ec);
    // Errors of one task name it; the store's concern the whole batch.
    if (e.status < 500) e.message = "tasks[" + std::to_string(bad) + "]: " + e.message;
    return error_answer(e);
  }
  for (const task& t : replaced) {
    parts_.broker->release_ready(t.id);
    if (parts_.pusher) parts_.pusher->withdraw(t.id, &t);
  }
  return json_answer(201, json{{"ids", ids}});
}

void api_router::get_task(call& c, const std::string& id) {
  // The owner knows whether its attempt runs; when it cannot be reached,
  // the store says what it can (delayed or ready by the due time).
  if (forward_foreign(c, id, [this, id] { return task_answer(id); })) return;
  // On the pool: a task this instance does not hold (past the horizon, of a
  // shard not read yet) is looked up in the store, and an I/O thread that
  // waited on it would stall every connection it serves.
  blocking(std::move(c.respond), [this, id] { return task_answer(id); });
}

http_answer api_router::task_answer(const std::string& id) const {
  boost::system::error_code ec;
  auto st = parts_.engine->status(id, ec);
  // The store could not say: not a 404, which a client takes for "gone".
  if (ec) return error_answer(from_error_code(ec, "task " + id));
  if (!st) return error_answer(not_found("no pending task with id " + id));
  json j = task_json(st->task);
  std::string state = state_name(st->state);
  if (st->state == task_state::running) {
    switch (parts_.broker->state_of(id)) {
      case lease_broker::held::ready: state = "ready"; break;
      case lease_broker::held::reserved: state = "reserved"; break;
      case lease_broker::held::none: break;  // pushed now
    }
  }
  j["state"] = state;
  return json_answer(200, j);
}

http_answer api_router::chase(const std::string& id, const char* what,
                              const std::function<bool(boost::system::error_code&)>& act) {
  boost::system::error_code ec;
  const auto pushed = [this](const std::string& type) { return parts_.registry->has(type); };
  switch (server::chase(*parts_.engine, *parts_.broker, pushed, id, act, ec, chase_patience,
                        transit_patience)) {
    case chase_result::done: return no_content();
    case chase_result::not_found: return error_answer(not_found("no pending task with id " + id));
    case chase_result::running:
      return error_answer(conflict("conflict", "task " + id +
                                                   " is running (reserved by a consumer or being "
                                                   "pushed); it can be " +
                                                   what + " once its attempt ends"));
    case chase_result::busy: break;
    case chase_result::failed: return error_answer(from_error_code(ec, "task " + id));
  }
  return error_answer(conflict("conflict", "task " + id + " kept becoming due; try again"));
}

void api_router::cancel_task(call& c, const std::string& id) {
  if (forward_foreign(c, id)) return;
  blocking(std::move(c.respond), [this, id] {
    return chase(id, "cancelled", [&](boost::system::error_code& ec) {
      if (!parts_.engine->cancel(id, ec)) return false;
      // A replaced older version may still wait for a consumer, or for its
      // push to be written: it must not be delivered either.
      parts_.broker->release_ready(id);
      if (parts_.pusher) parts_.pusher->withdraw(id);
      return true;
    });
  });
}

void api_router::reschedule_task(call& c, const std::string& id) {
  if (!c.parse_body()) return;
  when_spec w;
  if (auto e = parse_when(c.body, w)) return c.fail(*e);
  if (forward_foreign(c, id)) return;
  blocking(std::move(c.respond), [this, id, w] {
    const auto due = w.due(parts_.engine->now());
    return chase(id, "rescheduled", [&](boost::system::error_code& ec) {
      return parts_.engine->reschedule(id, due, ec);
    });
  });
}

void api_router::signal_task(call& c, const std::string& id) {
  if (!c.parse_body(true)) return;
  std::uint32_t n = 1;
  if (auto e = parse_signal(c.body, n)) return c.fail(*e);
  if (forward_foreign(c, id)) return;
  // Blocks until the new count is durable: off the I/O threads. A task that
  // waits for a consumer or is reserved is running for the engine: 409
  // already_triggered, like any task whose attempt started.
  blocking(std::move(c.respond), [this, id, n] {
    boost::system::error_code ec;
    const signal_result r = parts_.engine->signal(id, n, ec);
    if (ec == errc::not_found) return error_answer(not_found("no pending task with id " + id));
    if (ec) return error_answer(from_error_code(ec, "task " + id));
    return json_answer(200, json{{"id", id},
                                 {"signals", r.signals},
                                 {"trigger_count", r.trigger_count},
                                 {"triggered", r.triggered}});
  });
}

}  // namespace delayq::server
