// api_router: the HTTP API of docs/server.md, request by request. It finds
// the route in one table, checks the token, parses the body (request_codec),
// and calls the engine, the lease broker or the push registry; calls that
// wait on the store run on a small pool of threads, never on the I/O
// threads.
#pragma once

#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <memory>
#include <string>

#include "api/batch_split.hpp"
#include "api/forward_call.hpp"
#include "api/request_guard.hpp"
#include "cluster/peer_directory.hpp"
#include "cluster/peer_forwarder.hpp"
#include "delayq/engine.hpp"
#include "http/http_server.hpp"
#include "ops/store_health.hpp"
#include "pull/lease_broker.hpp"
#include "push/push_client.hpp"
#include "push/push_policy.hpp"
#include "push/push_registry.hpp"
#include "wire/api_error.hpp"

namespace delayq::server {

/// What the router reaches. Everything must outlive the router.
struct api_parts {
  delayq::engine* engine = nullptr;
  lease_broker* broker = nullptr;
  push_registry* registry = nullptr;
  push_client* pusher = nullptr;
  /// Where pushes may go: PUT /v1/types checks a target against it. Null:
  /// anywhere.
  const push_policy* push_allow = nullptr;
  const http_server* http = nullptr;  ///< For /metrics' request counts; may be null.
  std::size_t io_threads = 0;         ///< For /metrics (delayq_io_threads).
  /// Whether the store answers, as /healthz reports it (kept by its own
  /// probe: a health check never reads the store).
  const store_health* health = nullptr;
  /// The token check (request_guard::authorized), asked again for each
  /// route after the HTTP layer's check of the headers. Null: no token.
  const request_guard* guard = nullptr;
  /// Under --cluster: where the other instances take calls, and the client
  /// that forwards a call on an id to its shard's owner. Null: no cluster
  /// (or no forwarding): such calls answer 421 not_owner.
  peer_directory* peers = nullptr;
  const peer_forwarder* forwarder = nullptr;
  forward_limits forwarding;
  /// Appends series of other parts to /metrics (the beanstalk listener's);
  /// may be empty.
  std::function<void(std::string&)> extra_metrics;
};

/// Thread safety: handle() may be called from any thread, concurrently.
class api_router {
 public:
  /// `blocking_threads` threads run the calls that wait for the store.
  api_router(api_parts parts, std::size_t blocking_threads);
  ~api_router();
  api_router(const api_router&) = delete;
  api_router& operator=(const api_router&) = delete;

  /// Answers one request through `respond` (exactly once).
  void handle(http_request&& req, http_respond respond, std::shared_ptr<http_gone_signal> gone);

  /// Waits for the calls running on the pool to end (after a drain).
  void join();

  /// Whether a request may wait for tasks (a long poll: a reserve, or a
  /// finish or fail with "next", whose wait_ms is not 0), so the HTTP layer
  /// watches its socket for the client going away meanwhile.
  static bool is_long_poll(const http_request& req);

  /// Every route: its method and its path, a `{name}` segment standing for
  /// any one segment ("POST", "/v1/tasks/{id}/finish"). The table route()
  /// dispatches through; `delayq-server --list-routes` prints it.
  static std::vector<std::pair<std::string, std::string>> routes();

 private:
  struct call;         // one request being answered (api_router.cpp)
  struct route_entry;  // a method, a path pattern and its handler
  static const std::vector<route_entry>& route_table();
  void route(call& c);
  void blocking(http_respond respond, std::function<http_answer()> fn);
  // cancel and reschedule: `act` until it succeeds, giving a task that waits
  // for a consumer back to the engine first (api_router.cpp says why).
  http_answer chase(const std::string& id, const char* what,
                    const std::function<bool(boost::system::error_code&)>& act);
  void settings(http_respond respond, std::function<http_answer()> fn);
  // Under --cluster, a call on an id whose shard another instance owns is
  // sent there, once: true when it was (the answer is on its way). `local`
  // answers a GET from this instance's view when the owner cannot be reached.
  bool forward_foreign(call& c, const std::string& id,
                       std::function<http_answer()> local = nullptr);
  // The same to a named instance (`to`), unless it is this one.
  bool forward_to(call& c, std::string to, const std::string& id,
                  std::function<http_answer()> local = nullptr);

  void add_task(call& c);
  void add_batch(call& c);
  // A batch of several owners: a part to each, one answer (batch_split.hpp).
  void split_batch_call(call& c, std::vector<add_request> rs, std::vector<batch_part> parts);
  // Stores `rs` here in one atomic write (blocking: on the pool).
  http_answer store_batch(std::vector<add_request> rs);
  void get_task(call& c, const std::string& id);
  http_answer task_answer(const std::string& id) const;  // GET of a task, from here
  void cancel_task(call& c, const std::string& id);
  void reschedule_task(call& c, const std::string& id);
  void signal_task(call& c, const std::string& id);
  // Pull routes (api_router_pull.cpp).
  void reserve(call& c);
  // Leases what `r` asks for and answers with it (reserve, and finish or
  // fail with "next"); `gone` (may be null) ends a wait early; the fields
  // of `extra` (an object, or null) join the answer's "tasks".
  void reserve_for(const reserve_request& r, http_respond respond,
                   const std::shared_ptr<http_gone_signal>& gone, nlohmann::json extra = nullptr);
  void end_lease(call& c, const std::string& id, const std::string& verb);
  void finish_batch(call& c);
  void put_type(call& c, const std::string& type);
  void get_type(call& c, const std::string& type);
  void get_types(call& c);
  void delete_type(call& c, const std::string& type);
  void list_dead(call& c);
  void requeue_dead(call& c, const std::string& id);
  void purge_dead(call& c, const std::string& id);
  void stats(call& c);
  void upcoming(call& c);
  // Recurring schedules (api_router_schedules.cpp).
  void put_schedule(call& c, const std::string& id);
  void get_schedule(call& c, const std::string& id);
  void delete_schedule(call& c, const std::string& id);
  void list_schedules(call& c);
  void healthz(call& c);
  void metrics(call& c);

  api_parts parts_;
  boost::asio::thread_pool pool_;
  std::unique_ptr<call_forwarder> forwarding_;  // under --cluster
  // Settings calls share one store connection: one at a time.
  boost::asio::strand<boost::asio::thread_pool::executor_type> settings_;
};

/// An answer with a JSON body (dump_json).
http_answer json_answer(unsigned status, const nlohmann::json& body);
/// An answer for an api_error.
http_answer error_answer(const api_error& e);

}  // namespace delayq::server
