// api_router_pull.cpp - api_router's routes for consumers that pull
// (docs/server.md, "Pull: reserve, finish, fail, touch"): POST /v1/reserve,
// finish, fail and touch of one task, and POST /v1/tasks:finish, several
// finishes in one call. Under --cluster a lease ends on the instance that
// handed it out (its name ends the lease): a call made elsewhere is
// forwarded there.
#include <map>
#include <mutex>

#include "api/api_call.hpp"
#include "api/api_router.hpp"
#include "wire/dump_json.hpp"
#include "wire/request_codec.hpp"
#include "wire/task_json.hpp"

namespace delayq::server {
namespace {

using nlohmann::json;

// One finish's outcome in POST /v1/tasks:finish's "results": the error
// the single call would have answered.
json item_error(const std::string& id, const api_error& e) {
  return json{{"id", id}, {"status", e.status}, {"error", e.name}, {"message", e.message}};
}

api_error stale_lease(const std::string& lease, const std::string& id) {
  return conflict("stale_lease", "lease " + lease + " is not the current lease of task " + id +
                                     " (it ended, was replaced, or never existed)");
}

api_error gone_holder(const std::string& lease, const std::string& holder) {
  return conflict("stale_lease", "lease " + lease + " was handed out by instance " + holder +
                                     ", which is gone: the task is delivered again under a new "
                                     "lease");
}

// A finish or fail whose outcome the store did not confirm (`ec` is set).
api_error unstored(const std::string& verb, const std::string& id, boost::system::error_code ec) {
  if (ec == errc::attempt_ended) return conflict("stale_lease", "the attempt had ended already");
  // The attempt ended and its lease with it; the engine keeps the write
  // and retries it. Not an error to retry: a distinct name says so.
  return {503, "not_durable_yet",
          "the " + verb + " of task " + id + " was taken, but the store did not confirm it yet (" +
              ec.message() +
              "); it is written when the store is back. Do not repeat it; if the server stops "
              "first, the task is delivered again."};
}

// The outcome of a finish sent to `holder`, the instance that handed out
// its lease, when no outcome of its own came back: what the forwarder said
// (`error`: the call was not sent, or no answer came), told about this
// task; any other answer (`status`, a peer without the route, a broken
// body) is the peer's fault: 502.
json unanswered_finish(const std::string& id, const std::string& holder, unsigned status,
                       const std::string& error) {
  const std::string whose = "instance " + holder + ", which handed out the lease of task " + id;
  if (error == "owner_unreachable")
    return item_error(
        id,
        {503, error, whose + ", could not be reached or is shutting down: it was not finished"});
  if (error == "outcome_unknown")
    return item_error(id, {503, error,
                           "the finish of task " + id + " was sent to " + whose +
                               ", and no answer came: it may have been done"});
  if (error == "busy")
    return item_error(id, {503, error,
                           "too many calls are being forwarded: the finish of task " + id +
                               " was not sent to instance " + holder});
  if (error == "not_owner")
    return item_error(id, {421, error, whose + ", announced no address: it was not finished"});
  return item_error(id, {502, "bad_gateway",
                         "instance " + holder + " answered HTTP " + std::to_string(status) +
                             " without the outcome of the finish of task " + id});
}

}  // namespace

void api_router::reserve(call& c) {
  if (!c.parse_body(true)) return;
  reserve_request r;
  if (auto e = parse_reserve(c.body, r)) return c.fail(*e);
  reserve_for(r, std::move(c.respond), c.gone);
}

void api_router::reserve_for(const reserve_request& r, http_respond respond,
                             const std::shared_ptr<http_gone_signal>& gone, json extra) {
  const std::uint64_t waiter =
      parts_.broker->reserve(r, [broker = parts_.broker, respond = std::move(respond),
                                 extra = std::move(extra)](std::vector<leased_task> tasks) mutable {
        json list = json::array();
        for (const leased_task& lt : tasks) {
          json j = task_json(lt.t);
          j["lease"] = lt.lease;
          list.push_back(std::move(j));
        }
        json out = extra.is_object() ? std::move(extra) : json::object();
        out["tasks"] = std::move(list);
        http_answer a = json_answer(200, out);
        if (!tasks.empty())
          a.after_write = [broker, tasks = std::move(tasks)](bool written) {
            if (!written) broker->give_back(tasks);
          };
        respond(std::move(a));
      });
  // A consumer that closed its connection stops waiting now, so nothing is
  // leased to it (and then given back) in the meantime.
  if (waiter != 0 && gone)
    gone->on_gone([broker = parts_.broker, waiter] { broker->cancel_wait(waiter); });
}

void api_router::end_lease(call& c, const std::string& id, const std::string& verb) {
  if (!c.parse_body()) return;
  lease_request r;
  std::optional<api_error> e;
  if (verb == "finish")
    e = parse_finish(c.body, r);
  else if (verb == "fail")
    e = parse_fail(c.body, r);
  else
    e = parse_touch(c.body, r);
  if (e) return c.fail(*e);
  // To the instance that handed the lease out (its name ends the lease),
  // where the attempt runs: during a hand-over that is not the shard's
  // next owner, and the attempt is what the hand-over waits for.
  if (forwarding_ && !parts_.forwarder->is_forwarded(c.req)) {
    std::string holder = lease_broker::instance_of(r.lease);
    if (!holder.empty() && holder != forwarding_->instance()) {
      // An instance no longer among the live members took its attempts
      // with it (its shards' new owners deliver the tasks again): no call
      // can end that lease any more.
      const auto live = parts_.engine->members();
      if (!live.empty() && !std::binary_search(live.begin(), live.end(), holder))
        return c.fail(gone_holder(r.lease, holder));
      if (forward_to(c, std::move(holder), id)) return;
    }
  }
  const auto stale = [&] { c.fail(stale_lease(r.lease, id)); };
  if (verb == "touch") {
    if (parts_.broker->touch(id, r.lease, r.ttr) == lease_broker::lease_result::stale)
      return stale();
    return c.answer(no_content());
  }
  // Answered once the outcome is durable (attempt_completion's on_stored);
  // with "next", by the reserve that follows it (a worker's ack and its next
  // take in one round trip).
  auto respond = std::make_shared<http_respond>(std::move(c.respond));
  auto on_stored = [this, respond, id, verb, next = std::move(r.next),
                    gone = c.gone](boost::system::error_code ec) {
    if (!ec && next) return reserve_for(*next, std::move(*respond), gone);
    if (!ec) return (*respond)(no_content());
    (*respond)(error_answer(unstored(verb, id, ec)));
  };
  const auto result =
      verb == "finish" ? parts_.broker->finish(id, r.lease, std::move(on_stored))
                       : parts_.broker->fail(id, r.lease, std::move(r.error), std::move(on_stored));
  if (result == lease_broker::lease_result::stale) {
    c.respond = std::move(*respond);
    stale();
  }
}

// POST /v1/tasks:finish. Each finish is what POST /v1/tasks/{id}/finish
// does, and has its own outcome in "results" (the position of its task);
// the call is answered once every one is known. Finishes of leases another
// instance handed out go there as one call per instance.
void api_router::finish_batch(call& c) {
  if (!c.parse_body()) return;
  finish_batch_request r;
  if (auto e = parse_finish_batch(c.body, r)) return c.fail(*e);
  struct gather {
    std::mutex mutex;
    json results;
    std::size_t left = 0;
    bool all_durable = true;  // every outcome 204 or 409: "next" may reserve
    std::optional<reserve_request> next;
    std::shared_ptr<http_gone_signal> gone;
    http_respond respond;
  };
  auto g = std::make_shared<gather>();
  const std::size_t n = r.tasks.size();
  g->results = json::array();
  for (std::size_t i = 0; i < n; ++i) g->results.push_back(nullptr);
  g->left = n + 1;  // and one for this function: an outcome may come before the loop ends
  g->next = std::move(r.next);
  g->gone = c.gone;
  g->respond = std::move(c.respond);
  const auto settled = [this, g](std::size_t k, json result) {
    std::unique_lock lock(g->mutex);
    if (k < g->results.size()) {
      // 204 done, 409 nothing to do; anything else may still be written.
      const unsigned status = result.value("status", 0u);
      if (status != 204 && status != 409) g->all_durable = false;
      g->results[k] = std::move(result);
    }
    if (--g->left > 0) return;
    json out{{"results", std::move(g->results)}};
    auto respond = std::exchange(g->respond, nullptr);
    lock.unlock();
    // As a single finish: nothing reserved unless every outcome is durable.
    if (g->next && g->all_durable)
      return reserve_for(*g->next, std::move(respond), g->gone, std::move(out));
    if (g->next) out["tasks"] = json::array();
    respond(json_answer(200, out));
  };
  // Under --cluster: the finishes of each other live instance's leases.
  std::map<std::string, std::vector<std::size_t>> elsewhere;
  const bool route = forwarding_ && !parts_.forwarder->is_forwarded(c.req);
  std::vector<std::string> live;
  if (route) live = parts_.engine->members();
  for (std::size_t k = 0; k < n; ++k) try {
      const auto& [id, lease] = r.tasks[k];
      if (route) {
        std::string holder = lease_broker::instance_of(lease);
        if (!holder.empty() && holder != forwarding_->instance()) {
          if (!live.empty() && !std::binary_search(live.begin(), live.end(), holder))
            settled(k, item_error(id, gone_holder(lease, holder)));
          else
            elsewhere[std::move(holder)].push_back(k);
          continue;
        }
      }
      const auto result =
          parts_.broker->finish(id, lease, [settled, k, id](boost::system::error_code ec) {
            settled(k, ec ? item_error(id, unstored("finish", id, ec))
                          : json{{"id", id}, {"status", 204}});
          });
      if (result == lease_broker::lease_result::stale)
        settled(k, item_error(id, stale_lease(lease, id)));
    } catch (const std::exception& e) {
      // c.respond is the gather's now: the router's own 500 cannot answer.
      // The finishes before this one went ahead; this one may have.
      settled(k, item_error(r.tasks[k].id,
                            {500, "internal_error",
                             std::string("the finish failed in the server: ") + e.what()}));
    }
  for (auto& [holder, index] : elsewhere) {
    // The holder's finishes as a call of their own, with the caller's
    // token; its "results" are theirs, in the same order.
    json sub = json::array();
    for (const std::size_t k : index)
      sub.push_back(json{{"id", r.tasks[k].id}, {"lease", r.tasks[k].lease}});
    http_request req = sub_call(c.req, "/v1/tasks:finish", json{{"tasks", std::move(sub)}});
    std::vector<std::string> ids;
    for (const std::size_t k : index) ids.push_back(r.tasks[k].id);
    std::string first = ids.front();  // not read from `ids`, moved into the handler
    forwarding_->forward(
        holder, std::move(req), std::move(first),
        [settled, index = std::move(index), ids = std::move(ids), holder](http_answer a) {
          const json j = json::parse(a.body, nullptr, false);
          const bool whole = a.status == 200 && j.is_object() && j.contains("results") &&
                             j["results"].is_array() && j["results"].size() == index.size();
          std::string error;  // what the forwarder said, when it answered instead
          if (!whole && j.is_object() && j.value("error", json()).is_string())
            error = j["error"].get<std::string>();
          for (std::size_t m = 0; m < index.size(); ++m) {
            const json got = whole ? j["results"][m] : json();
            if (got.is_object() && got.value("id", json()) == ids[m] &&
                got.value("status", json()).is_number_unsigned())
              settled(index[m], got);
            else
              settled(index[m], unanswered_finish(ids[m], holder, a.status, error));
          }
        },
        nullptr);
  }
  settled(n, json());  // this function's own count
}

}  // namespace delayq::server
