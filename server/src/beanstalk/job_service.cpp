#include "beanstalk/job_service.hpp"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cctype>
#include <thread>

#include "beanstalk/stats_yaml.hpp"
#include "beanstalk/tube_name.hpp"
#include "delayq/sequence_store.hpp"
#include "pull/task_chase.hpp"
#include "wire/http_url.hpp"

namespace delayq::server::beanstalk {

using std::chrono::system_clock;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// Numbers taken from the store at once: a restart skips what was left of
// the block (ids stay unique, with a gap), and a put costs a store round
// trip only once per block.
constexpr std::uint64_t id_block = 128;
constexpr const char* sequence_name = "beanstalk.job_id";
// beanstalk's TTR is any number of seconds; delayq stores a lease of up to
// 12 hours (the HTTP reserve's bound), so a longer TTR is taken as 12 hours.
constexpr std::uint32_t max_ttr_s = 12 * 3600;
// Jobs whose beanstalk counters are kept (stats-job); past it, a new job's
// counters read 0. About 70 bytes each (counted_jobs).
constexpr std::size_t max_counted_jobs = std::size_t{1} << 20;

}  // namespace

job_service::job_service(parts p, std::size_t blocking_threads)
    : p_(std::move(p)), pool_(blocking_threads) {}

job_service::~job_service() { pool_.join(); }

answer job_service::error(const boost::system::error_code& ec) {
  answer a;
  if (ec == errc::not_running)
    a.what = answer::kind::draining;
  else if (ec == errc::queue_full || ec == errc::type_full || ec == errc::busy)
    a.what = answer::kind::out_of_memory;
  else if (ec == errc::invalid_delay || ec == errc::due_too_far || ec == errc::payload_too_large ||
           ec == errc::invalid_type)
    a.what = answer::kind::bad_format;
  else if (ec == errc::not_found || ec == errc::attempt_ended)
    a.what = answer::kind::not_found;
  else
    a.what = answer::kind::internal_error;
  return a;
}

void job_service::blocking(answer_handler done, std::function<answer()> fn) {
  boost::asio::post(pool_, [done = std::move(done), fn = std::move(fn)] {
    answer a;
    try {
      a = fn();
    } catch (const std::exception&) {
      a.what = answer::kind::internal_error;
    }
    done(std::move(a));
  });
}

// ------------------------------------------------------------------ ids

std::optional<std::uint64_t> job_service::next_number_now() {
  std::lock_guard lock(ids_mutex_);
  if (next_ == end_) return std::nullopt;
  return next_++;
}

std::optional<std::uint64_t> job_service::next_number(boost::system::error_code& ec) {
  std::lock_guard refill(refill_mutex_);
  if (auto n = next_number_now()) return n;  // another thread refilled meanwhile
  std::uint64_t first = 0;
  sequence_store* seq = p_.sequences ? sequences_of(*p_.sequences, ec) : nullptr;
  if (seq) {
    first = seq->allocate(sequence_name, id_block, ec);
    if (ec) return std::nullopt;
  } else {
    ec.clear();
    first = local_next_;
    local_next_ += id_block;
  }
  std::lock_guard lock(ids_mutex_);
  next_ = first + 1;
  end_ = first + id_block;
  return first;
}

std::optional<std::uint64_t> job_service::own_number(boost::system::error_code& ec) {
  // A member holds about 1/N of the shards: a few numbers are skipped
  // (never used, so ids stay unique). None of 1,024 held means it holds no
  // shard at all yet (just started): the put fails, and may be tried again.
  for (int i = 0; i < 1024; ++i) {
    const auto n = next_number(ec);
    if (!n || !p_.owns || p_.owns(std::to_string(*n))) return n;
  }
  ec = errc::not_owner;
  return std::nullopt;
}

// ------------------------------------------------------------------ put

void job_service::put(std::string type, std::string body, std::uint32_t priority,
                      std::uint32_t delay_s, std::uint32_t ttr_s, answer_handler done) {
  if (draining()) return done(answer{.what = answer::kind::draining});
  put_args args{.type = std::move(type),
                .body = std::move(body),
                .priority = priority,
                .delay_s = delay_s,
                .due = p_.engine->now() + std::chrono::seconds{delay_s},
                .ttr = std::chrono::seconds{std::clamp<std::uint32_t>(ttr_s, 1, max_ttr_s)}};
  // One instance stores every number; a cluster's member picks one of its
  // own shards' (own_number(), on the blocking threads).
  if (!p_.owns)
    if (auto n = next_number_now()) return schedule_put(std::move(args), *n, 0, std::move(done));
  put_on_pool(std::move(args), 0, std::move(done));
}

void job_service::put_on_pool(put_args args, int tries, answer_handler done) {
  // A new block of numbers is a store round trip: not on this thread.
  boost::asio::post(pool_, [this, args = std::move(args), tries, done = std::move(done)]() mutable {
    boost::system::error_code ec;
    const auto n = own_number(ec);
    if (!n) return done(answer{.what = answer::kind::internal_error});
    schedule_put(std::move(args), *n, tries, std::move(done));
  });
}

void job_service::schedule_put(put_args args, std::uint64_t number, int tries,
                               answer_handler done) {
  schedule_options opts;
  opts.id = std::to_string(number);
  opts.priority = args.priority;
  opts.ttr = args.ttr;
  // Kept for a retry under the next number: a pending HTTP task may hold
  // this one (an id that is a number is that job, whoever made it). The
  // engine takes the body and the type, so this is a copy of each.
  put_args again = args;
  const auto due = args.due;
  p_.engine->async_schedule_at(
      std::move(args.type), std::move(args.body), due, std::move(opts),
      // 201's promise: INSERTED only once the job is durable; and a job due
      // now is in the broker's ready order by then (the fallback executor
      // starts immediately), so the next reserve on any connection sees it.
      // Answered where the outcome is learnt: on this thread for memory:.
      direct([this, number, tries, again = std::move(again), done = std::move(done)](
                 boost::system::error_code ec, const std::string& id) mutable {
        // A number an HTTP task holds, or (a cluster)
        // one whose shard moved away: the next one.
        if ((ec == errc::duplicate_id || ec == errc::not_owner) && tries < 16)
          return put_on_pool(std::move(again), tries + 1, std::move(done));
        if (ec) return done(error(ec));
        with_counts(id, [&](job_counts& c) {
          c.born = std::chrono::steady_clock::now();
          c.delay_s = again.delay_s;
        });
        done(answer{.id = number});
      }));
}

// ------------------------------------------------------------------ a job's end

void job_service::remove(std::uint64_t job, std::optional<leased_task> mine, answer_handler done) {
  // A job this client holds is named by its task id, not looked up again by
  // number (an alias may name another task by now).
  const auto id = mine ? std::optional<std::string>(mine->t.id) : names_.id_of(job);
  if (!id) return done(answer{.what = answer::kind::not_found});
  if (mine) {
    // Reserved by this client: the attempt ends as a success, answered
    // once the removal is durable. A lease that is no longer this client's
    // (its time-to-run ran out) is refused as stale, the handler unused.
    auto shared = std::make_shared<answer_handler>(std::move(done));
    const auto r = p_.broker->finish(
        *id, mine->lease,
        [this, shared, id = *id, type = std::move(mine->t.type)](boost::system::error_code ec) {
          if (!ec) {
            std::lock_guard lock(counts_mutex_);
            ++deletes_[type];
            jobs_.erase(id);
          }
          (*shared)(ec ? error(ec) : answer{});
        });
    if (r == lease_broker::lease_result::ok) return;
    done = std::move(*shared);
  }
  if (foreign(*id)) return forward_remove(*id, std::move(done));
  blocking(std::move(done), [this, id = *id] {
    // Reserved by another client: beanstalkd answers NOT_FOUND.
    if (p_.broker->state_of(id) == lease_broker::held::reserved)
      return answer{.what = answer::kind::not_found};
    boost::system::error_code ec;
    std::string type;
    const auto r = chase(
        *p_.engine, *p_.broker, p_.pushed, id,
        [&](boost::system::error_code& e) {
          if (auto t = p_.engine->find(id, e)) type = t->type;
          if (e) return false;
          if (!p_.engine->cancel(id, e)) return false;
          p_.broker->release_ready(id);  // an older version may wait there
          return true;
        },
        ec);
    switch (r) {
      case chase_result::done: {
        std::lock_guard lock(counts_mutex_);
        ++deletes_[type];
        jobs_.erase(id);
        return answer{};
      }
      case chase_result::not_found: break;
      case chase_result::running: return answer{.what = answer::kind::not_found};
      case chase_result::busy: return answer{.what = answer::kind::internal_error};
      case chase_result::failed: return error(ec);
    }
    // Not pending: a buried job, or none.
    const auto letter = find_buried(id, ec);
    if (ec) return error(ec);
    if (!letter) return answer{.what = answer::kind::not_found};
    if (!p_.engine->purge(id, ec)) return ec ? error(ec) : answer{.what = answer::kind::not_found};
    std::lock_guard lock(counts_mutex_);
    ++deletes_[letter->task.type];
    jobs_.erase(id);
    return answer{};
  });
}

void job_service::release(const leased_task& held, std::uint32_t priority, std::uint32_t delay_s,
                          answer_handler done) {
  auto shared = std::make_shared<answer_handler>(std::move(done));
  const auto r = p_.broker->release(
      held.t.id, held.lease, p_.engine->now() + std::chrono::seconds{delay_s}, priority,
      [this, shared, id = held.t.id, delay_s](boost::system::error_code ec) {
        if (!ec) {
          with_counts(id, [&](job_counts& c) {
            ++c.releases;
            c.delay_s = delay_s;
          });
        }
        (*shared)(ec ? error(ec) : answer{});
      });
  if (r == lease_broker::lease_result::stale) (*shared)(answer{.what = answer::kind::not_found});
}

void job_service::bury(const leased_task& held, std::uint32_t priority, answer_handler done) {
  auto shared = std::make_shared<answer_handler>(std::move(done));
  const auto r = p_.broker->bury(held.t.id, held.lease, "buried by a beanstalk client", priority,
                                 [this, shared, id = held.t.id](boost::system::error_code ec) {
                                   if (!ec) with_counts(id, [](job_counts& c) { ++c.buries; });
                                   (*shared)(ec ? error(ec) : answer{});
                                 });
  if (r == lease_broker::lease_result::stale) (*shared)(answer{.what = answer::kind::not_found});
}

answer job_service::touch(const leased_task& held) {
  if (p_.broker->touch(held.t.id, held.lease, std::nullopt) == lease_broker::lease_result::stale)
    return answer{.what = answer::kind::not_found};
  return answer{};
}

void job_service::reserve_job(std::uint64_t job, answer_handler done) {
  const auto id = names_.id_of(job);
  // Another instance's job is leased there only (docs/beanstalk.md).
  if (!id || foreign(*id)) return done(answer{.what = answer::kind::not_found});
  const lease_terms terms{.expiry_abandons = true};
  if (auto lt = p_.broker->reserve_id(*id, p_.default_ttr, terms)) {
    count_reserve(*id);
    answer a = job_answer(lt->t);
    a.lease = std::move(lt);
    return done(std::move(a));
  }
  // Delayed or buried: made ready now, then leased once the engine offers
  // it to the broker (within a tick or two).
  blocking(std::move(done), [this, id = *id, terms] {
    boost::system::error_code ec;
    const auto now = p_.engine->now();
    const auto st = p_.engine->status(id, ec);
    if (ec) return error(ec);
    if (!st) {
      // Buried, or no such job.
      if (!p_.engine->requeue(id, now, ec)) return ec ? error(ec) : answer{answer::kind::not_found};
    } else if (st->state == task_state::delayed && st->task.due > now) {
      if (!p_.engine->reschedule(id, now, ec) && ec) return error(ec);
    }
    // Ready (or on its way to the broker): taken as soon as it is offered.
    const auto give_up = std::chrono::steady_clock::now() + 2s;
    auto pause = 1ms;
    while (std::chrono::steady_clock::now() < give_up) {
      if (auto lt = p_.broker->reserve_id(id, p_.default_ttr, terms)) {
        count_reserve(id);
        answer a = job_answer(lt->t);
        a.lease = std::move(lt);
        return a;
      }
      // Reserved by someone else meanwhile: it is not ours to take.
      if (p_.broker->state_of(id) == lease_broker::held::reserved) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, 4ms);
    }
    return answer{.what = answer::kind::not_found};
  });
}

// ------------------------------------------------------------------ per-job counts

job_service::job_counts* job_service::counted_jobs::find(const std::string& id) {
  return lookup(id, false);
}

job_service::job_counts* job_service::counted_jobs::find_or_add(const std::string& id,
                                                                std::size_t limit) {
  return lookup(id, by_number_.size() + by_id_.size() < limit);
}

job_service::job_counts* job_service::counted_jobs::lookup(const std::string& id, bool add) {
  // One parse of the id and one probe of its map, found or added (a put
  // adds one on every job).
  const auto in = [add](auto& map, const auto& key) -> job_counts* {
    if (add) return &map.try_emplace(key).first->second;
    auto it = map.find(key);
    return it == map.end() ? nullptr : &it->second;
  };
  if (const auto n = job_names::numeric(id)) return in(by_number_, *n);
  return in(by_id_, id);
}

void job_service::counted_jobs::erase(const std::string& id) {
  if (const auto n = job_names::numeric(id))
    by_number_.erase(*n);
  else
    by_id_.erase(id);
}

template <class F>
void job_service::with_counts(const std::string& id, F f) {
  std::lock_guard lock(counts_mutex_);
  if (job_counts* c = jobs_.find_or_add(id, max_counted_jobs)) f(*c);
}

void job_service::count_reserve(const std::string& id) {
  with_counts(id, [](job_counts& c) { ++c.reserves; });
}

void job_service::count_timeout(const std::string& id) {
  ++timeouts_;
  with_counts(id, [](job_counts& c) { ++c.timeouts; });
}

// ------------------------------------------------------------------ clusters

void job_service::forward_remove(const std::string& id, answer_handler done) {
  // DELETE /v1/tasks/{id} cancels it there (409 while reserved there:
  // beanstalkd's NOT_FOUND); a 404 may be a buried job: its dead letter.
  const std::string target = "/v1/tasks/" + percent_encode(id);
  p_.forward(id, "DELETE", target, "", [this, id, done](unsigned status, std::string) {
    if (status == 204) return done(answer{});
    if (status == 409) return done(answer{.what = answer::kind::not_found});
    if (status != 404) return done(answer{.what = answer::kind::internal_error});
    p_.forward(id, "DELETE", "/v1/dead/" + percent_encode(id), "",
               [done](unsigned status, std::string) {
                 done(answer{.what = status == 204   ? answer::kind::ok
                                     : status == 404 ? answer::kind::not_found
                                                     : answer::kind::internal_error});
               });
  });
}

void job_service::forward_kick(const std::string& id, answer_handler done) {
  // A buried job: requeued now. Else a delayed one: due now. (A ready or
  // reserved job is not kicked: beanstalkd's NOT_FOUND; a reschedule of a
  // reserved task answers 409 there.)
  p_.forward(id, "POST", "/v1/dead/" + percent_encode(id) + "/requeue", "{}",
             [this, id, done](unsigned status, std::string) {
               if (status == 204) return done(answer{});
               if (status != 404) return done(answer{.what = answer::kind::internal_error});
               p_.forward(id, "POST", "/v1/tasks/" + percent_encode(id) + "/reschedule",
                          R"({"delay_ms":0})", [done](unsigned status, std::string) {
                            done(answer{.what = status == 204 ? answer::kind::ok
                                                : status == 404 || status == 409
                                                    ? answer::kind::not_found
                                                    : answer::kind::internal_error});
                          });
             });
}

// ------------------------------------------------------------------ peeks and kicks

answer job_service::job_answer(const task& t) {
  answer a;
  a.id = names_.number_of(t.id);
  a.body = t.payload;
  return a;
}

std::optional<dead_letter> job_service::find_buried(const std::string& id,
                                                    boost::system::error_code& ec) {
  auto d = p_.engine->find_dead(id, ec);
  if (ec == errc::unsupported) ec.clear();  // a store without dead letters buries nothing
  return d;
}

std::vector<dead_letter> job_service::buried_of(const std::string& type, std::size_t limit,
                                                boost::system::error_code& ec, std::size_t* total) {
  constexpr std::size_t page = 512;
  std::vector<dead_letter> out;
  if (total) *total = 0;
  for (std::size_t offset = 0;; offset += page) {
    auto letters = p_.engine->dead_letters(offset, page, ec);
    if (ec == errc::unsupported) {
      ec.clear();
      return out;
    }
    if (ec) return out;
    for (dead_letter& d : letters) {
      if (d.task.type != type) continue;
      if (total) ++*total;
      if (out.size() < limit) out.push_back(std::move(d));
    }
    if (letters.size() < page || (!total && out.size() >= limit)) return out;
  }
}

void job_service::peek(std::uint64_t job, answer_handler done) {
  const auto id = names_.id_of(job);
  if (!id) return done(answer{.what = answer::kind::not_found});
  blocking(std::move(done), [this, id = *id] {
    boost::system::error_code ec;
    if (auto t = p_.engine->find(id, ec)) return job_answer(*t);
    if (ec) return error(ec);
    if (auto d = find_buried(id, ec)) return job_answer(d->task);
    return ec ? error(ec) : answer{.what = answer::kind::not_found};
  });
}

void job_service::peek_ready(const std::string& type, answer_handler done) {
  if (auto t = p_.broker->peek_ready(type)) return done(job_answer(*t));
  done(answer{.what = answer::kind::not_found});
}

void job_service::peek_delayed(const std::string& type, answer_handler done) {
  blocking(std::move(done), [this, type] {
    // The delayed job with the shortest delay left: the earliest due of
    // the type's pending tasks that is still in the future.
    const auto now = p_.engine->now();
    for (const task& t : p_.engine->upcoming(64, type))
      if (t.due > now) return job_answer(t);
    return answer{.what = answer::kind::not_found};
  });
}

void job_service::peek_buried(const std::string& type, answer_handler done) {
  blocking(std::move(done), [this, type] {
    boost::system::error_code ec;
    auto letters = buried_of(type, 1, ec);
    if (ec) return error(ec);
    if (letters.empty()) return answer{.what = answer::kind::not_found};
    return job_answer(letters.front().task);
  });
}

void job_service::kick(const std::string& type, std::uint64_t bound, answer_handler done) {
  blocking(std::move(done), [this, type, bound] {
    // Buried jobs first; delayed ones only when none is buried (beanstalkd).
    boost::system::error_code ec;
    const std::size_t limit = static_cast<std::size_t>(std::min<std::uint64_t>(bound, 1u << 20));
    answer a;
    const auto now = p_.engine->now();
    const auto kicked = [&](const std::string& id) {
      ++a.count;
      with_counts(id, [](job_counts& c) { ++c.kicks; });
    };
    for (const dead_letter& d : buried_of(type, limit, ec)) {
      if (p_.engine->requeue(d.task.id, now, ec)) kicked(d.task.id);
      if (ec) break;
    }
    if (ec && a.count == 0) return error(ec);
    if (a.count > 0) return a;
    for (const task& t : p_.engine->upcoming(limit, type)) {
      if (t.due <= now) continue;
      if (p_.engine->reschedule(t.id, now, ec)) kicked(t.id);
      if (ec) break;
    }
    if (ec && a.count == 0) return error(ec);
    return a;
  });
}

void job_service::kick_job(std::uint64_t job, answer_handler done) {
  const auto id = names_.id_of(job);
  if (!id) return done(answer{.what = answer::kind::not_found});
  if (foreign(*id)) return forward_kick(*id, std::move(done));
  blocking(std::move(done), [this, id = *id] {
    boost::system::error_code ec;
    const auto now = p_.engine->now();
    const auto kicked = [&] {
      with_counts(id, [](job_counts& c) { ++c.kicks; });
      return answer{};
    };
    if (auto st = p_.engine->status(id, ec); st) {
      if (st->state != task_state::delayed || st->task.due <= now)
        return answer{.what = answer::kind::not_found};  // ready or reserved
      if (p_.engine->reschedule(id, now, ec)) return kicked();
      return ec ? error(ec) : answer{.what = answer::kind::not_found};
    }
    if (ec) return error(ec);
    if (p_.engine->requeue(id, now, ec)) return kicked();
    return ec ? error(ec) : answer{.what = answer::kind::not_found};
  });
}

void job_service::pause_tube(const std::string& type, std::uint32_t delay_s) {
  // A pause of N s ends N s from now; 0 ends a pause at once (beanstalkd
  // 1.12 does so: a reserve right after it gets the tube's jobs).
  p_.broker->pause(type, std::chrono::seconds{delay_s});
  std::lock_guard lock(counts_mutex_);
  auto& c = pauses_[type];
  ++c.count;
  c.seconds = delay_s;
}

// ------------------------------------------------------------------ stats

void job_service::stats_job(std::uint64_t job, answer_handler done) {
  const auto id = names_.id_of(job);
  if (!id) return done(answer{.what = answer::kind::not_found});
  blocking(std::move(done), [this, job, id = *id] {
    boost::system::error_code ec;
    const auto now = p_.engine->now();
    std::optional<task> t;
    job_stats s;
    std::chrono::nanoseconds left{0};
    if (auto lt = p_.broker->lease_of(id)) {
      t = lt->t;
      s.state = "reserved";
      left = lt->deadline - std::chrono::steady_clock::now();
    } else if (auto st = p_.engine->status(id, ec)) {
      t = st->task;
      const bool later = st->state == task_state::delayed && st->task.due > now;
      s.state = later ? "delayed" : "ready";
      if (later) left = st->task.due - now;
    } else if (ec) {
      return error(ec);
    } else if (auto d = find_buried(id, ec)) {
      t = d->task;
      s.state = "buried";
    }
    if (ec) return error(ec);
    if (!t) return answer{.what = answer::kind::not_found};
    const auto secs = [](auto d) {
      return std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(d).count());
    };
    s.id = job;
    s.tube = tube_of_type(t->type).value_or(t->type);
    s.pri = t->priority;
    s.ttr = secs(t->ttr.count() > 0 ? t->ttr : p_.default_ttr);
    s.time_left = secs(left);
    // The counts beanstalkd keeps per job are kept in memory here, for the
    // jobs seen since this server started; for the others they read as the
    // store knows them (reserves: the attempts made) or 0, and the delay as
    // the time left, rounded up (docs/beanstalk.md, "Commands").
    s.reserves = t->attempts;
    s.delay = s.state == "delayed" ? std::chrono::ceil<std::chrono::seconds>(left).count() : 0;
    {
      std::lock_guard lock(counts_mutex_);
      if (const job_counts* counted = jobs_.find(id)) {
        const job_counts& c = *counted;
        if (c.born != steady::time_point{}) s.age = secs(steady::now() - c.born);
        s.delay = c.delay_s;
        s.reserves = c.reserves;
        s.timeouts = c.timeouts;
        s.releases = c.releases;
        s.buries = c.buries;
        s.kicks = c.kicks;
      }
    }
    answer a;
    a.yaml = job_stats_yaml(s);
    return a;
  });
}

void job_service::stats_tube(const std::string& type, std::size_t using_, std::size_t watching,
                             std::size_t waiting, answer_handler done) {
  blocking(std::move(done), [this, type, using_, watching, waiting] {
    tube_stats s;
    s.name = tube_of_type(type).value_or(type);
    if (auto all = p_.broker->type_stats(); all.count(type)) {
      const auto& held = all.find(type)->second;
      s.current_jobs_urgent = held.urgent;
      s.current_jobs_ready = held.ready;
      s.current_jobs_reserved = held.reserved;
    }
    for (const type_metrics& m : p_.engine->metrics().types) {
      if (m.type != type) continue;
      // Running attempts are the broker's ready and reserved jobs (or
      // pushes): the rest of the pending ones wait for their time.
      s.current_jobs_delayed = m.pending > m.running ? m.pending - m.running : 0;
      s.total_jobs = m.scheduled;
    }
    boost::system::error_code ec;
    std::size_t buried = 0;
    buried_of(type, 0, ec, &buried);
    s.current_jobs_buried = buried;
    s.current_using = using_;
    s.current_watching = watching;
    s.current_waiting = waiting;
    {
      std::lock_guard lock(counts_mutex_);
      if (auto it = deletes_.find(type); it != deletes_.end()) s.cmd_delete = it->second;
      if (auto it = pauses_.find(type); it != pauses_.end()) {
        s.cmd_pause_tube = it->second.count;
        s.pause = it->second.seconds;
      }
    }
    s.pause_time_left = p_.broker->paused_for(type).count() / 1000;
    answer a;
    a.yaml = tube_stats_yaml(s);
    return a;
  });
}

void job_service::stats(const connection_counts& connections, std::size_t tubes,
                        answer_handler done) {
  blocking(std::move(done), [this, connections, tubes] {
    server_stats s;
    const auto held = p_.broker->stats();
    for (const auto& [type, c] : p_.broker->type_stats()) s.current_jobs_urgent += c.urgent;
    const engine_stats es = p_.engine->stats();
    s.current_jobs_ready = held.ready;
    s.current_jobs_reserved = held.reserved;
    s.current_jobs_delayed = es.pending > es.running ? es.pending - es.running : 0;
    s.current_jobs_buried = es.dead;
    for (std::size_t i = 0; i < verb_count; ++i) s.cmd[i] = commands_[i].load();
    s.job_timeouts = timeouts_.load();
    s.total_jobs = es.scheduled;
    s.max_job_size = p_.max_job_size;
    s.current_tubes = tubes;
    s.current_connections = connections.current;
    s.current_producers = connections.producers;
    s.current_workers = connections.workers;
    s.current_waiting = connections.waiting;
    s.total_connections = connections.total;
    s.pid = getpid();
    // The protocol level spoken, in a form semver parses (clients read it
    // to decide which commands exist: kick-job needs 1.8), with delayq's own
    // version as build metadata.
    s.version = "1.13.0+delayq." DELAYQ_VERSION;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const auto micros = [](const timeval& tv) {
      return static_cast<std::uint64_t>(tv.tv_sec) * 1'000'000 +
             static_cast<std::uint64_t>(tv.tv_usec);
    };
    s.rusage_utime_us = micros(ru.ru_utime);
    s.rusage_stime_us = micros(ru.ru_stime);
    s.uptime = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                              std::chrono::steady_clock::now() - started_)
                                              .count());
    s.draining = draining();
    s.id = p_.instance;
    s.hostname = p_.instance;
    utsname un{};
    uname(&un);
    s.os = un.version;
    s.platform = un.machine;
    answer a;
    a.yaml = server_stats_yaml(s);
    return a;
  });
}

std::vector<std::string> job_service::types() const {
  std::vector<std::string> out;
  for (const type_metrics& m : p_.engine->metrics().types) out.push_back(m.type);
  for (const auto& [type, c] : p_.broker->type_stats())
    if (std::find(out.begin(), out.end(), type) == out.end()) out.push_back(type);
  return out;
}

}  // namespace delayq::server::beanstalk
