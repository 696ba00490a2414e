#include "beanstalk/session.hpp"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <thread>
#include <utility>

#include "beanstalk/reply.hpp"
#include "beanstalk/stats_yaml.hpp"
#include "beanstalk/tube_name.hpp"

namespace delayq::server::beanstalk {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// beanstalkd's safety margin: a reserve waiting while a job the client
// holds is within its last second answers DEADLINE_SOON.
constexpr auto safety_margin = 1s;
// "reserve" without a timeout waits as long as the connection lasts.
constexpr auto forever = std::chrono::hours{24 * 365};
// Bytes read and not yet run, and replies not yet sent, past which the
// session stops reading: a connection's memory stays below about both, plus
// one put body (the reader holds that), whatever the client sends.
constexpr std::size_t max_unread = 64 * 1024;
constexpr std::size_t max_unsent = 256 * 1024;
// How long one write may wait for a client that does not read (HTTP's).
constexpr auto write_timeout = std::chrono::seconds{30};

std::string_view error_of(answer::kind k) {
  switch (k) {
    case answer::kind::ok: break;
    case answer::kind::not_found: return replies::not_found;
    case answer::kind::draining: return replies::draining;
    case answer::kind::bad_format: return replies::bad_format;
    case answer::kind::out_of_memory: return replies::out_of_memory;
    case answer::kind::internal_error: return replies::internal_error;
  }
  return replies::internal_error;
}

}  // namespace

session::session(socket_type socket, const std::atomic<job_service*>& service,
                 session_registry& registry, std::size_t max_job_size, connection_limits limits,
                 std::shared_ptr<void> home)
    : home_(std::move(home)),
      socket_(std::move(socket)),
      service_source_(service),
      service_(service.load()),
      registry_(registry),
      reader_(max_job_size),
      buf_(16 * 1024),
      soon_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()),
      limits_(limits),
      id_(registry.next_id()),
      command_timer_(socket_.get_executor()),
      idle_timer_(socket_.get_executor()) {
  reserve_.types = watched_types();
}

// Nothing here may touch the service or the registry: a session still
// queued when the server stops is destroyed with the io_context, after them.
// close() did the work on a live server; the broker's close() gave back
// what the others held.
session::~session() = default;

void session::start() {
  // Counted at once (the acceptor's cap reads the count), the rest on the
  // session's own executor: start() runs on the acceptor's thread, and the
  // first read's handler may run on the session's thread before start()
  // returned (watch_state() and pump() both read the command reader).
  registry_.opened();
  registry_.track(id_, weak_from_this(), idle_since_);
  registry_.use("", using_);
  registry_.watch(watching_.front(), +1);
  // Non-blocking for write(): a reply that does not fit goes on by
  // async_write.
  // (Not set: every reply goes by async_write, as a write_some would block.)
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  non_blocking_ = !ec;
  boost::asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->read();
    self->watch_state();
  });
}

void session::evict() {
  boost::asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    // Picked while it held nothing; a reserve it made since is kept.
    if (!self->reserved_.empty() || self->waiter_ != 0) return;
    self->registry_.count_close(close_reason::evicted);
    self->close();
  });
}

void session::watch_state() {
  if (closed_) return;
  // A command the client began and has not finished: the line, or a put's
  // body, partly read (the reader holds it). One deadline for the whole
  // command, from the moment it began: a client sending a byte at a time
  // does not stretch it.
  const bool partial = !busy_ && !closing_ && !reader_.idle();
  if (partial && !in_command_) {
    in_command_ = true;
    if (limits_.command_timeout.count() > 0) {
      const std::uint64_t gen = ++command_gen_;
      command_timer_.expires_after(limits_.command_timeout);
      command_timer_.async_wait(
          [self = shared_from_this(), gen](const boost::system::error_code& ec) {
            if (ec || self->closed_ || !self->in_command_ || self->command_gen_ != gen) return;
            self->registry_.count_close(close_reason::command_timeout);
            self->close();
          });
    }
  } else if (!partial && in_command_) {
    in_command_ = false;
    ++command_gen_;
    command_timer_.cancel();
  }
  // Holding nothing (no reservation, no reserve waiting, no command being
  // answered, no reply unsent): the listener may close it for room, and the
  // idle timeout runs. A command begun and left unfinished holds nothing
  // either: such a connection is idle since its last byte (a client that
  // stalls mid-command must not be able to keep its place at the cap for
  // a whole command deadline).
  const bool idle = !busy_ && !closing_ && reserved_.empty() && waiter_ == 0 && out_.empty() &&
                    writing_.empty() && (partial || in_pos_ == in_.size());
  const bool progressed = std::exchange(progressed_, false);
  if (idle && (!idle_ || progressed)) {
    // Idle from now (bytes came: again, the last the listener would close).
    idle_ = true;
    mark_idle();
    if (limits_.idle_timeout.count() > 0) {
      const std::uint64_t gen = ++idle_gen_;
      idle_timer_.expires_after(limits_.idle_timeout);
      idle_timer_.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
        if (ec || self->closed_ || !self->idle_ || self->idle_gen_ != gen) return;
        self->registry_.count_close(close_reason::idle_timeout);
        self->close();
      });
    }
  } else if (!idle && idle_) {
    idle_ = false;
    ++idle_gen_;
    idle_timer_.cancel();
    registry_.mark_busy(*idle_since_);
  }
}

void session::mark_idle() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  // Never 0, which means "holds something".
  registry_.mark_idle(*idle_since_,
                      std::max<std::int64_t>(1, std::chrono::nanoseconds(now).count()));
}

void session::read() {
  // Reading goes on while a command waits (a reserve), so a client that
  // hangs up is seen at once; it stops while too much is unread or unsent,
  // and the kernel's buffers then push back on the client.
  if (reading_ || closed_ || closing_) return;
  if (in_.size() - in_pos_ >= max_unread || out_.size() + writing_.size() >= max_unsent) return;
  reading_ = true;
  socket_.async_read_some(
      boost::asio::buffer(buf_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        self->reading_ = false;
        if (ec) return self->close();
        self->progressed_ = true;
        self->in_.append(self->buf_.data(), n);
        self->pump();
      });
}

void session::pump() {
  while (!busy_ && !closed_ && !closing_ && out_.size() < max_unsent) {
    std::string_view rest(in_.data() + in_pos_, in_.size() - in_pos_);
    protocol_error e{};
    const auto r = reader_.read(rest, command_, e);
    in_pos_ = in_.size() - rest.size();
    if (r == command_reader::status::more) break;
    if (r == command_reader::status::error) {
      out_ += error_reply(e);
      continue;
    }
    if (!run_here(command_)) busy_ = true;
  }
  // Drop what was run: at once when all of it was, else once the run part
  // is large (a client that keeps pipelining may never let it all be run,
  // and the bytes already run would pile up in front).
  if (in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
  } else if (in_pos_ >= 16 * 1024) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
  write();
  read();
  watch_state();
}

bool session::run_here(command& c) {
  running_on_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  answered_inline_ = false;
  const bool done = run(c);
  running_on_.store(std::thread::id{}, std::memory_order_relaxed);
  return done || std::exchange(answered_inline_, false);
}

bool session::answering_inline() const noexcept {
  // run() is on the stack of this thread: an answer for its command.
  return running_on_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

void session::write() {
  if (closed_ || !writing_.empty()) return;
  if (out_.empty()) {
    if (closing_ && !busy_) close();
    return;
  }
  writing_.swap(out_);
  // Most replies fit the socket's buffer at once: sent here, with no write
  // deadline to arm and cancel (a timer system call for each reply). Only
  // pump() calls write(), and goes on to read() and watch_state(); it runs
  // again only for what a write's completion would have let go on: commands
  // held back by max_unsent, or a quit once its replies are out.
  if (non_blocking_) {
    boost::system::error_code ec;
    const std::size_t sent = socket_.write_some(boost::asio::buffer(writing_), ec);
    if (ec && ec != boost::asio::error::would_block) return close();
    if (!ec && sent == writing_.size()) {
      writing_.clear();
      if (in_pos_ != in_.size() || closing_)
        boost::asio::post(socket_.get_executor(), [self = shared_from_this()] { self->pump(); });
      return;
    }
    if (!ec) writing_.erase(0, sent);
  }
  // A client that stops reading its replies is closed after write_timeout,
  // as HTTP's are: its replies would otherwise be held for ever.
  const std::uint64_t n = ++writes_;
  write_timer_.expires_after(write_timeout);
  write_timer_.async_wait([self = shared_from_this(), n](const boost::system::error_code& ec) {
    if (!ec && self->writes_ == n && !self->writing_.empty()) self->close();
  });
  boost::asio::async_write(
      socket_, boost::asio::buffer(writing_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
        self->writing_.clear();
        self->write_timer_.cancel();
        if (ec) return self->close();
        // Room again: the commands held back by max_unsent run now.
        self->pump();
      });
}

void session::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  soon_timer_.cancel();
  write_timer_.cancel();
  command_timer_.cancel();
  idle_timer_.cancel();
  idle_ = false;
  registry_.mark_busy(*idle_since_);
  registry_.forget(id_);
  if (counted_waiting_) {
    counted_waiting_ = false;
    registry_.wait(watching_, -1);
  }
  if (waiter_ != 0 && service_) service_->broker().cancel_wait(waiter_);
  if (service_ && !reserved_.empty()) {
    // beanstalkd puts a closed connection's jobs back into the ready queue.
    std::vector<leased_task> back;
    for (auto& [n, lt] : reserved_) back.push_back(std::move(lt));
    reserved_.clear();
    service_->broker().give_back(back);
  }
  registry_.use(using_, "");
  for (const std::string& t : watching_) registry_.watch(t, -1);
  registry_.closed(producer_, worker_);
}

void session::remember(std::uint64_t job, leased_task lt) {
  // Its id and lease are what the commands on it need: the body (up to
  // --max-job-size) is not kept, nor copied by every delete or release.
  std::string().swap(lt.t.payload);
  reserved_[job] = std::move(lt);
}

std::optional<leased_task> session::held(std::uint64_t job) const {
  auto it = reserved_.find(job);
  if (it == reserved_.end()) return std::nullopt;
  return it->second;
}

void session::prune_reserved() {
  for (auto it = reserved_.begin(); it != reserved_.end();) {
    const auto now = service_->broker().lease_of(it->second.t.id);
    if (now && now->lease == it->second.lease) {
      it->second.deadline = now->deadline;  // touched meanwhile
      ++it;
      continue;
    }
    // Its time-to-run ended: the job is ready again, not ours.
    service_->count_timeout(it->second.t.id);
    it = reserved_.erase(it);
  }
}

std::optional<steady::time_point> session::first_deadline() const {
  std::optional<steady::time_point> first;
  for (const auto& [n, lt] : reserved_)
    if (!first || lt.deadline < *first) first = lt.deadline;
  return first;
}

std::vector<std::string> session::tube_names() const {
  // A tube exists while a connection uses or watches it, or delayq knows
  // its type (tasks of it were scheduled or loaded); "default" always.
  std::vector<std::string> tubes = registry_.tubes();
  for (const std::string& type : service_->types())
    if (auto tube = tube_of_type(type)) tubes.push_back(std::move(*tube));
  tubes.push_back("default");
  std::sort(tubes.begin(), tubes.end());
  tubes.erase(std::unique(tubes.begin(), tubes.end()), tubes.end());
  return tubes;
}

std::vector<std::string> session::watched_types() const {
  std::vector<std::string> out;
  for (const std::string& tube : watching_)
    if (auto t = type_of_tube(tube)) out.push_back(std::move(*t));
  return out;
}

void session::reply_answer(verb v, const answer& a) {
  if (a.what != answer::kind::ok) {
    out_ += error_of(a.what);
    return;
  }
  switch (v) {
    case verb::put: return append_inserted(out_, a.id);
    case verb::delete_: out_ += replies::deleted; return;
    case verb::release: out_ += replies::released; return;
    case verb::bury: out_ += replies::buried; return;
    case verb::touch: out_ += replies::touched; return;
    case verb::kick: return append_kicked(out_, a.count);
    case verb::kick_job: out_ += replies::kicked; return;
    case verb::reserve_job: return append_reserved(out_, a.id, a.body);
    case verb::peek:
    case verb::peek_ready:
    case verb::peek_delayed:
    case verb::peek_buried: return append_found(out_, a.id, a.body);
    case verb::stats:
    case verb::stats_job:
    case verb::stats_tube: return append_ok(out_, a.yaml);
    default: out_ += replies::internal_error; return;
  }
}

bool session::run(command& c) {
  if (c.name == verb::quit) {
    closing_ = true;
    return true;
  }
  // Until the store answered once, nothing can be done: beanstalk has no
  // "unavailable", and INTERNAL_ERROR is what its clients retry on.
  if (!service_) service_ = service_source_.load();
  if (!service_) {
    out_ += replies::internal_error;
    return true;
  }
  service_->count_command(c.name);
  // An answer from the service arrives on the thread that learnt it: here,
  // before the service call returns, when it was known at once (an
  // in-process store; a task made ready is in the broker by then), and then
  // it is written where we stand; else back to the strand.
  const auto later = [this, v = c.name](auto&& extra) {
    return [self = shared_from_this(), v,
            extra = std::forward<decltype(extra)>(extra)](answer a) mutable {
      if (self->answering_inline()) {
        extra(*self, a);
        self->reply_answer(v, a);
        self->answered_inline_ = true;
        return;
      }
      boost::asio::post(self->socket_.get_executor(),
                        [self, v, extra = std::move(extra), a = std::move(a)]() {
                          if (self->closed_) {
                            // A reserve-job answered after the client left:
                            // its job is ready again at once.
                            if (a.lease) self->service_->broker().give_back({*a.lease});
                            return;
                          }
                          extra(*self, a);
                          self->reply_answer(v, a);
                          self->busy_ = false;
                          self->pump();
                        });
    };
  };
  const auto plain = later([](session&, const answer&) {});
  // The tube a command names: BAD_FORMAT when delayq cannot hold it as a
  // task type (tube_name.hpp).
  const auto type_of = [&](const std::string& tube) -> std::optional<std::string> {
    auto t = type_of_tube(tube);
    if (!t) out_ += replies::bad_format;
    return t;
  };
  const auto known = [&](const std::string& tube, const std::string& type) {
    const auto types = service_->types();
    const auto tubes = registry_.tubes();
    return tube == "default" || std::find(types.begin(), types.end(), type) != types.end() ||
           std::find(tubes.begin(), tubes.end(), tube) != tubes.end();
  };

  switch (c.name) {
    case verb::put: {
      if (!producer_) registry_.became(producer_ = true, false);
      service_->put(*type_of_tube(using_), std::move(c.body), c.priority, c.delay, c.ttr, plain);
      return false;
    }
    case verb::use: {
      if (!type_of(c.tube)) return true;
      registry_.use(using_, c.tube);
      using_ = c.tube;
      append_using(out_, using_);
      return true;
    }
    case verb::watch: {
      if (!type_of(c.tube)) return true;
      if (std::find(watching_.begin(), watching_.end(), c.tube) == watching_.end()) {
        watching_.push_back(c.tube);
        reserve_.types = watched_types();
        registry_.watch(c.tube, +1);
      }
      append_watching(out_, watching_.size());
      return true;
    }
    case verb::ignore: {
      // NOT_IGNORED only for the last tube watched; a tube not watched is
      // ignored already (beanstalkd answers WATCHING then).
      if (auto it = std::find(watching_.begin(), watching_.end(), c.tube); it != watching_.end()) {
        if (watching_.size() < 2) {
          out_ += replies::not_ignored;
          return true;
        }
        watching_.erase(it);
        reserve_.types = watched_types();
        registry_.watch(c.tube, -1);
      }
      append_watching(out_, watching_.size());
      return true;
    }
    case verb::reserve: return reserve(std::nullopt);
    case verb::reserve_with_timeout: return reserve(c.timeout);
    case verb::reserve_job:
      service_->reserve_job(c.id, later([](session& s, const answer& a) {
                              if (a.lease) s.remember(a.id, *a.lease);
                            }));
      return false;
    case verb::delete_:
      // Deleted, or gone meanwhile: not held here either way.
      service_->remove(c.id, held(c.id),
                       later([id = c.id](session& s, const answer&) { s.reserved_.erase(id); }));
      return false;
    case verb::release:
    case verb::bury: {
      const auto lt = held(c.id);
      if (!lt) {
        out_ += replies::not_found;
        return true;
      }
      // Released or buried, or its lease ended meanwhile: not ours either way.
      auto forget = later([id = c.id](session& s, const answer&) { s.reserved_.erase(id); });
      if (c.name == verb::release)
        service_->release(*lt, c.priority, c.delay, std::move(forget));
      else
        service_->bury(*lt, c.priority, std::move(forget));
      return false;
    }
    case verb::touch: {
      const auto lt = held(c.id);
      const answer a = lt ? service_->touch(*lt) : answer{answer::kind::not_found};
      if (a.what == answer::kind::ok) {
        if (auto now = service_->broker().lease_of(lt->t.id))
          reserved_[c.id].deadline = now->deadline;
      }
      reply_answer(c.name, a);
      return true;
    }
    case verb::peek: service_->peek(c.id, plain); return false;
    case verb::peek_ready: service_->peek_ready(*type_of_tube(using_), plain); return false;
    case verb::peek_delayed: service_->peek_delayed(*type_of_tube(using_), plain); return false;
    case verb::peek_buried: service_->peek_buried(*type_of_tube(using_), plain); return false;
    case verb::kick: service_->kick(*type_of_tube(using_), c.bound, plain); return false;
    case verb::kick_job: service_->kick_job(c.id, plain); return false;
    case verb::stats_job: service_->stats_job(c.id, plain); return false;
    case verb::stats_tube: {
      const auto type = type_of(c.tube);
      if (!type) return true;
      if (!known(c.tube, *type)) {
        out_ += replies::not_found;
        return true;
      }
      const auto n = registry_.of(c.tube);
      service_->stats_tube(*type, n.using_, n.watching, n.waiting, plain);
      return false;
    }
    case verb::stats: {
      service_->stats(registry_.counts(), tube_names().size(), plain);
      return false;
    }
    case verb::list_tubes: append_ok(out_, tube_list_yaml(tube_names())); return true;
    case verb::list_tube_used: append_using(out_, using_); return true;
    case verb::list_tubes_watched: append_ok(out_, tube_list_yaml(watching_)); return true;
    case verb::pause_tube: {
      const auto type = type_of(c.tube);
      if (!type) return true;
      if (!known(c.tube, *type)) {
        out_ += replies::not_found;
        return true;
      }
      service_->pause_tube(*type, c.delay);
      out_ += replies::paused;
      return true;
    }
    case verb::quit: break;
  }
  return true;
}

bool session::reserve(std::optional<std::uint32_t> timeout) {
  prune_reserved();
  const auto first = first_deadline();
  // beanstalkd: a job this client holds in its last second (the safety
  // margin) ends the wait with DEADLINE_SOON, but only when nothing is ready
  // for it now: so look first, without waiting.
  const bool soon = first && *first - steady::now() <= safety_margin;
  if (!worker_) registry_.became(false, worker_ = true);
  reserve_request& r = reserve_;  // its types kept as watching_ changes
  r.max = 1;
  r.wait = soon      ? std::chrono::milliseconds{0}
           : timeout ? std::chrono::milliseconds(std::chrono::seconds{*timeout})
                     : std::chrono::duration_cast<std::chrono::milliseconds>(forever);
  r.ttr = service_->default_ttr();
  deadline_soon_ = soon;
  waiter_ = service_->broker().reserve(
      r,
      [self = shared_from_this(), forever_ = !timeout](std::vector<leased_task> tasks) {
        if (self->answering_inline()) {
          // A job was ready: answered before reserve() returned.
          self->answered(std::move(tasks), forever_, false);
          self->answered_inline_ = true;
          return;
        }
        boost::asio::post(self->socket_.get_executor(),
                          [self, forever_, tasks = std::move(tasks)]() mutable {
                            self->answered(std::move(tasks), forever_, true);
                          });
      },
      lease_terms{.expiry_abandons = true});
  // Counted as waiting only when it waits: a job ready now answered it
  // inside reserve() (two registry updates a reserve saved). An answer that
  // comes from another thread is posted here, so it runs after this and
  // finds the count to take back.
  if (waiter_ != 0 && r.wait.count() > 0) {
    registry_.wait(watching_, +1);
    counted_waiting_ = true;
  }
  if (first && !soon && waiter_ != 0) {
    soon_timer_.expires_at(*first - safety_margin);
    soon_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->waiter_ == 0 || self->closed_) return;
      // The broker answers the wait with nothing unless a job came first.
      self->deadline_soon_ = true;
      self->service_->broker().cancel_wait(self->waiter_);
    });
  }
  return false;
}

void session::answered(std::vector<leased_task> tasks, bool forever, bool resume) {
  waiter_ = 0;
  soon_timer_.cancel();
  if (counted_waiting_) {
    counted_waiting_ = false;
    registry_.wait(watching_, -1);
  }
  if (closed_) {
    if (!tasks.empty()) service_->broker().give_back(tasks);
    return;
  }
  if (!tasks.empty()) {
    leased_task& lt = tasks.front();
    const std::uint64_t n = service_->names().number_of(lt.t.id);
    append_reserved(out_, n, lt.t.payload);
    service_->count_reserve(lt.t.id);
    remember(n, std::move(lt));
  } else if (deadline_soon_) {
    out_ += replies::deadline_soon;
  } else if (!forever) {
    out_ += replies::timed_out;
  } else {
    // A reserve without a timeout answered with nothing: the server is
    // draining. beanstalkd never times such a reserve out, so it stays
    // unanswered until the connection closes (a client would otherwise spin).
    return;
  }
  if (!resume) return;  // answered inside run(): pump() goes on by itself
  busy_ = false;
  pump();
}

}  // namespace delayq::server::beanstalk
