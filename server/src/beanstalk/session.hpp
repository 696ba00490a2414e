// beanstalk/session.hpp - one beanstalk client connection: its tube in use,
// the tubes it watches, the jobs it has reserved, and the loop that reads a
// command, runs it, and writes its reply, one command at a time and in
// order (the protocol pipelines, and replies must come back in order).
//
// Reserved jobs belong to the connection: when it closes, they are given
// back (ready again at once, uncounted), as beanstalkd does. While the
// client waits in reserve, a job it holds whose time-to-run ends within a
// second ends the wait with DEADLINE_SOON.
#pragma once

#include <atomic>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "beanstalk/command_reader.hpp"
#include "beanstalk/job_service.hpp"
#include "beanstalk/session_registry.hpp"
#include "io/connection_home.hpp"

namespace delayq::server::beanstalk {

/// How long a connection may take over what it sends (docs/beanstalk.md,
/// "Connections").
///
/// Thread safety: a plain value.
struct connection_limits {
  /// From a command's first byte to its last (the line, then a put's body);
  /// past it the connection is closed. 0: no deadline.
  std::chrono::milliseconds command_timeout{30'000};
  /// A connection that holds no reservation, waits in no reserve and has
  /// nothing begun or unanswered is closed once it stayed so this long. 0:
  /// never (beanstalkd's way).
  std::chrono::milliseconds idle_timeout{0};
};

/// Thread safety: none from outside; everything runs on the session's
/// strand (the socket's executor), but its idle mark, which the registry
/// reads and may clear from the acceptor's thread (an atomic). Keep it in a
/// shared_ptr: start() holds it alive until the connection ends.
class session : public std::enable_shared_from_this<session> {
 public:
  using socket_type =
      boost::asio::basic_stream_socket<boost::asio::generic::stream_protocol, connection_executor>;

  /// `service`: read at each command until it is set (the store answered).
  /// `home`: held until the session ends (the listener's session_home).
  session(socket_type socket, const std::atomic<job_service*>& service, session_registry& registry,
          std::size_t max_job_size, connection_limits limits = {},
          std::shared_ptr<void> home = nullptr);
  ~session();

  void start();

  /// Closes the connection to make room for a new one (the listener, at
  /// --max-connections), unless it came to hold a reservation or wait in a
  /// reserve since it was picked. Any thread: the work runs on the strand.
  void evict();

 private:
  void read();
  // Runs the commands held in `in_`, stopping at one that answers later.
  void pump();
  // Runs one command (it may take its strings); false when its reply comes
  // later (and pump() resumes then).
  bool run(command& c);
  // run(), noting that it runs here, so that an answer that comes back
  // before the service call returns is written at once (answering_inline()).
  bool run_here(command& c);
  bool answering_inline() const noexcept;
  void write();
  void close();
  // After every step: arms the command deadline when a command was begun
  // and not finished, and tells the registry (and the idle timer) whether
  // the connection holds nothing.
  void watch_state();
  // Tells the listener (through the registry) that it holds nothing since now.
  void mark_idle();
  // Appends the reply of a command of verb `v` that answered `a`.
  void reply_answer(verb v, const answer& a);
  // reserve and reserve-with-timeout; false: the reply comes later.
  bool reserve(std::optional<std::uint32_t> timeout);
  // The broker's answer to a reserve (`forever`: one without a timeout);
  // `resume`: it came later, so the commands held back run now.
  void answered(std::vector<leased_task> tasks, bool forever, bool resume);
  // Jobs reserved here whose lease is still theirs; drops the others.
  void prune_reserved();
  // The earliest deadline of the jobs reserved here.
  std::optional<std::chrono::steady_clock::time_point> first_deadline() const;
  // The job `job` as reserved here (its task id and lease), if it is.
  std::optional<leased_task> held(std::uint64_t job) const;
  // Keeps job `job` as reserved here (without its body).
  void remember(std::uint64_t job, leased_task lt);
  std::vector<std::string> watched_types() const;
  // list-tubes: every tube there is, sorted.
  std::vector<std::string> tube_names() const;

  std::shared_ptr<void> home_;
  socket_type socket_;
  const std::atomic<job_service*>& service_source_;
  job_service* service_ = nullptr;  // null until the store answered
  session_registry& registry_;
  command_reader reader_;
  command command_;  // the command being run, as reader_ parsed it into this one object
  std::vector<char> buf_;
  std::string in_;  // bytes read and not yet consumed by reader_ (from in_pos_)
  std::size_t in_pos_ = 0;
  std::string out_, writing_;
  bool non_blocking_ = false;  // the socket is: write() tries a send at once
  bool busy_ = false;          // a command's reply is on its way
  // The thread running run() now (none outside it), and whether the
  // command's answer came back inside it.
  // Read by the thread an answer arrives on, which may be another (an
  // engine or pool thread): atomic. Relaxed is enough: only this thread
  // could have stored its own id.
  std::atomic<std::thread::id> running_on_{};
  bool answered_inline_ = false;
  bool reading_ = false, closing_ = false, closed_ = false;
  bool producer_ = false, worker_ = false;

  std::string using_ = "default";  // a tube name
  std::vector<std::string> watching_{"default"};
  // A reserve's request, its types those of watching_ (kept as it changes,
  // not made again for each reserve).
  reserve_request reserve_;
  std::map<std::uint64_t, leased_task> reserved_;  // by job number; bodies dropped

  // A reserve waiting for a job.
  std::uint64_t waiter_ = 0;
  bool counted_waiting_ = false;  // in the registry's current-waiting
  bool deadline_soon_ = false;
  connection_timer soon_timer_;
  // The write in flight, and its deadline.
  std::uint64_t writes_ = 0;
  connection_timer write_timer_;
  // What the client takes its time over (connection_limits).
  connection_limits limits_;
  std::uint64_t id_ = 0;     // the registry's number for it
  bool in_command_ = false;  // a command begun, not finished by the client
  bool idle_ = false;        // holds nothing (idle_since_ is set)
  // Shared with the registry, which reads it when it needs room.
  std::shared_ptr<session_registry::idle_mark> idle_since_ =
      std::make_shared<session_registry::idle_mark>(0);
  bool progressed_ = false;  // bytes came since the last watch_state()
  std::uint64_t command_gen_ = 0, idle_gen_ = 0;
  connection_timer command_timer_, idle_timer_;
};

}  // namespace delayq::server::beanstalk
