// push/push_client.hpp - POSTs due tasks of push types to their HTTP targets.
//
// One push_client serves every push type. Each delivery is one HTTP/1.1 POST
// of the task's JSON; the target's answer decides the attempt (2xx: success,
// anything else: a failure with a reason the dead letter keeps).
//
// Concurrency is bounded per type, not globally: a slow target fills its own
// `concurrency` slots and queues its own tasks (FIFO), and the other types'
// deliveries go on. Connections are kept alive and pooled per host:port. A
// pooled connection may have been closed by the peer just as a request was
// written on it (the classic keep-alive race: the server's idle timeout fired
// while the connection sat in our pool); such a request, failing before any
// byte of a response arrived, is sent once more on a fresh connection. It
// may then reach the target twice, which at-least-once delivery allows
// anyway: receivers deduplicate by X-Delayq-Task-Id.
#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>

#include "delayq/task.hpp"
#include "push/push_target.hpp"

namespace delayq::server {

class push_policy;

/// Tuning of a push_client; the defaults suit most deployments.
struct push_client_options {
  /// Idle keep-alive connections kept per host:port.
  std::size_t max_idle_per_host = 32;
  /// A pooled connection idle longer than this is closed rather than reused
  /// (shorter than most servers' own keep-alive timeouts, to make the race
  /// described above rare).
  std::chrono::milliseconds idle_timeout{15000};
  /// Largest response body read (and discarded); a longer one is not an
  /// error, its status still counts, but the connection is not reused.
  std::size_t max_response_body = 64 * 1024;
  /// Sent as `X-Delayq-Instance` on every push when not empty: the server's
  /// instance name under --cluster (which instance ran the task).
  std::string instance;
  /// Under --cluster: the shard count. A push of an attempt that runs under
  /// a shard lease (task::fence not 0) then carries `X-Delayq-Shard:
  /// <shard_of(id, shards)>` and `X-Delayq-Fence: <task::fence>`, so that a
  /// receiver can refuse the work of an instance that lost the shard's lease
  /// (a lower token than one it saw for that shard: docs/scale-out.md).
  std::uint32_t shards = 0;
  /// The addresses pushes may connect to, checked after every resolve.
  /// Null: any (a test's client).
  std::shared_ptr<const push_policy> policy;
  /// Asked just before a request's bytes are written (after any wait for a
  /// slot, a resolve or a connect): false withdraws the delivery unsent
  /// (counted in withdrawn()), by destroying its `done` without calling it (an engine's
  /// async_executor completion then gives the task back, unattempted).
  /// Under --cluster, engine::attempt_current(): a delivery whose shard
  /// lease lapsed since its attempt started (the instance stalled, or its
  /// I/O threads were held up) would otherwise reach the receiver after the
  /// new owner's pushes, as the work of an instance that no longer owns the
  /// task. Null: always current. Called on the request's strand; must not
  /// block.
  std::function<bool(const delayq::task&)> attempt_current;
};

/// HTTP/1.1 client that delivers tasks to push targets.
///
/// Example:
/// \code
///   delayq::server::push_client client{io.get_executor()};
///   client.deliver("mail.send", {.url = "http://127.0.0.1:9000/hook"}, task,
///                  [](std::string failure) { /* "" on a 2xx answer */ });
/// \endcode
///
/// The request: `POST` of dump_json(task_json(t)) with `Content-Type:
/// application/json`, `X-Delayq-Task-Id: <id>`, `X-Delayq-Attempt: <attempts
/// + 1>`, `Host` and `User-Agent: delayq-server/<version>`, and
/// `X-Delayq-Instance: <name>` when push_client_options::instance is set,
/// `X-Delayq-Shard` and `X-Delayq-Fence` under a cluster (push_client_options::shards).
///
/// Thread safety: every member may be called from any thread, concurrently.
/// The I/O runs on the executor given at construction, which may be run by
/// several threads (each request runs on a strand of its own). The executor's
/// execution context must outlive the client's last operation: destroying the
/// context first drops the callbacks still pending, as stop() does.
class push_client {
 public:
  /// Receives "" on success, else a sentence starting "push to URL: ".
  using completion = std::function<void(std::string failure)>;

  explicit push_client(boost::asio::any_io_executor ex, push_client_options options = {});
  /// Calls stop().
  ~push_client();

  push_client(const push_client&) = delete;
  push_client& operator=(const push_client&) = delete;

  /// Sends `t` to `target` and calls `done` exactly once, from any thread:
  /// with "" on a 2xx answer, else with the reason, for example
  /// "push to http://h/p: HTTP 500", "push to http://h/p: timed out after
  /// 10000 ms" or "push to http://h/p: connect: Connection refused".
  ///
  /// `target.timeout` bounds the whole request (resolve, connect, write,
  /// read), counted from when it leaves the type's queue. When the type has
  /// `target.concurrency` requests in flight, the delivery waits in the
  /// type's FIFO queue; the limit is the one of the latest deliver() for the
  /// type. After drain() or stop(), or when the delivery is withdrawn
  /// (release_queued(), withdraw(), push_client_options::attempt_current),
  /// `done` is destroyed without being called.
  void deliver(const std::string& type, const push_target& target, const delayq::task& t,
               completion done);

  /// Ends, unsent (counted in withdrawn()), the deliveries waiting for a free slot for which
  /// `stale(task)` is true, by destroying their `done` without calling it
  /// (an engine's async_executor completion then gives the task back,
  /// unattempted); requests in flight go on. Returns how many. For
  /// engine_options::on_attempts_stale.
  std::size_t release_queued(const std::function<bool(const delayq::task&)>& stale);

  /// Withdraws the deliveries of task `id` accepted so far whose request
  /// is not written yet: queued ones at once, the others when they would
  /// write (a request being written or answered goes on). Each ends
  /// unsent, counted in withdrawn(), by destroying its `done` without
  /// calling it. `spare`, when given, names a version not to withdraw (its
  /// type, payload and due time, to the millisecond). For a replace (the
  /// new version spared) or a cancel of `id`: an older version whose push
  /// waits for a slot must not reach the receiver after the call is
  /// answered. Returns how many were queued.
  std::size_t withdraw(std::string_view id, const delayq::task* spare = nullptr);

  /// Starts no more requests, for a drain: the deliveries queued for a
  /// free slot, and every deliver() from now on, end by destroying their
  /// `done` without calling it (an engine's async_executor completion then
  /// gives the task back, unattempted), while the requests in flight go on
  /// and report their answers to `done` as usual. stop() ends those that are
  /// left. Returns at once. Idempotent; nothing after stop().
  void drain();

  /// Cancels everything, for a shutdown: queued deliveries and requests in
  /// flight end by destroying their `done` without calling it (an engine's
  /// async_executor completion then gives the task back, unattempted), and
  /// idle connections are closed. Returns at once; in-flight requests wind
  /// down on the executor. Idempotent.
  void stop();

  /// Requests started and not yet ended (all types).
  std::size_t in_flight() const;
  /// Deliveries waiting for a free slot of their type (all types).
  std::size_t queued() const;
  /// Deliveries that ended with a 2xx answer.
  std::uint64_t sent() const;
  /// Deliveries that ended with a failure reported to `done`.
  std::uint64_t failed() const;
  /// Deliveries withdrawn unsent: by release_queued() or withdraw(), or
  /// because push_client_options::attempt_current said no just before
  /// their request was written.
  std::uint64_t withdrawn() const;

 private:
  struct impl;  // Shared with the requests in flight, which may outlive the client.
  std::shared_ptr<impl> impl_;
};

}  // namespace delayq::server
