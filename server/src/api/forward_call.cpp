#include "api/forward_call.hpp"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <optional>

#include "api/api_router.hpp"
#include "wire/api_error.hpp"

namespace delayq::server {

namespace {

// The owner's own 503 while it shuts down (http_server: "draining"): it did
// nothing with the call. Reached on a kept-alive connection; a new one
// would have been refused.
bool owner_draining(const http_answer& a) {
  if (a.status != 503) return false;
  const auto body = nlohmann::json::parse(a.body, nullptr, false);
  return body.is_object() && body.value("error", "") == "draining";
}

}  // namespace

struct call_forwarder::state {
  std::string owner;
  http_request req;
  std::string id;
  http_respond respond;
  std::function<http_answer()> local;
  peer_forwarder::clock::time_point began;
  peer_forwarder::clock::time_point deadline;
  std::string url;          // the address tried last
  bool reread = false;      // the directory was read again after a failed connect
  std::string unreachable;  // why the last try could not be sent
};

call_forwarder::call_forwarder(peer_directory& peers, const peer_forwarder& fwd,
                               boost::asio::thread_pool& pool, forward_limits limits)
    : peers_(peers), fwd_(fwd), pool_(pool), limits_(limits) {}

void call_forwarder::forward(std::string owner, http_request req, std::string id,
                             http_respond respond, std::function<http_answer()> local) {
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_in_flight) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    return respond(error_answer({503, "busy",
                                 "too many calls are being forwarded to other instances; "
                                 "nothing was done"}));
  }
  auto f = std::make_shared<state>();
  f->owner = std::move(owner);
  f->req = std::move(req);
  f->id = std::move(id);
  f->respond = std::move(respond);
  f->local = std::move(local);
  f->began = peer_forwarder::clock::now();
  f->deadline = f->began + limits_.timeout;
  // An address the directory holds is used from here; a miss may read the
  // store, which only the pool may wait on.
  if (auto url = peers_.cached_url_of(f->owner)) return send_to(f, std::move(*url));
  boost::asio::post(pool_, [this, f] { send(f, false); });
}

// On the pool: the lookup may read the store.
void call_forwarder::send(const std::shared_ptr<state>& f, bool reread) {
  boost::system::error_code ec;
  std::optional<std::string> url;
  try {
    // A failed connect reads the directory again, unless a read finished
    // since this forward began: an owner that died fails every call on its
    // shards, and each must not cost a read of the store.
    if (reread) peers_.load_since(f->began, ec);
    if (!ec) url = peers_.url_of(f->owner, ec);
  } catch (const std::exception& e) {
    return answer(f, error_answer({500, "internal_error", e.what()}), false);
  }
  if (ec && !reread) return answer(f, error_answer(from_error_code(ec)), false);
  if (reread && (ec || !url || *url == f->url))
    // Nothing new to try: the first try's answer stands.
    return answer(f, error_answer({503, "owner_unreachable", f->unreachable}), false);
  if (!url)
    return answer(f,
                  error_answer({421, "not_owner",
                                "task " + f->id + " belongs to instance " + f->owner +
                                    ", which announced no address to forward the call to"}),
                  false);
  send_to(f, std::move(*url));
}

void call_forwarder::send_to(const std::shared_ptr<state>& f, std::string url) {
  f->url = std::move(url);
  fwd_.async_forward(f->url, f->req, f->deadline,
                     [this, f](http_answer a, bool sent, boost::system::error_code ec) {
                       on_answer(f, std::move(a), sent, ec);
                     });
}

// On the I/O threads.
void call_forwarder::on_answer(const std::shared_ptr<state>& f, http_answer a, bool sent,
                               boost::system::error_code ec) {
  if (!ec && owner_draining(a))
    // It refused the call: as when it cannot be reached, nothing was done
    // (and a read is answered from the store here).
    return answer(f,
                  error_answer({503, "owner_unreachable",
                                "task " + f->id + " belongs to instance " + f->owner +
                                    ", which is shutting down; nothing was done. Its shards "
                                    "move to another instance within two leases"}),
                  false);
  if (!ec) {
    a.headers.emplace_back("X-Delayq-Instance", f->owner);
    return answer(f, std::move(a), true);
  }
  if (sent)
    return answer(f,
                  error_answer({503, "outcome_unknown",
                                "the call was sent to instance " + f->owner + " (which owns task " +
                                    f->id + "), and its answer did not come back (" + ec.message() +
                                    "): it may or may not have been carried out there"}),
                  true);
  f->unreachable = "task " + f->id + " belongs to instance " + f->owner + " at " + f->url +
                   ", which cannot be reached (" + ec.message() +
                   "); nothing was done. If it is gone, its shards move to another instance "
                   "within two leases";
  // It may have come back on another address (a restart): read the
  // directory again, once.
  if (!f->reread && peer_forwarder::clock::now() < f->deadline) {
    f->reread = true;
    return boost::asio::post(pool_, [this, f] { send(f, true); });
  }
  answer(f, error_answer({503, "owner_unreachable", f->unreachable}), false);
}

void call_forwarder::answer(const std::shared_ptr<state>& f, http_answer a, bool reached) {
  if (!f->respond) return;  // answered already
  if (!reached && f->local) {
    // A read answered from here, on the pool (it may read the store).
    return boost::asio::post(pool_, [this, f] {
      http_answer local;
      try {
        local = f->local();
      } catch (const std::exception& e) {
        local = error_answer({500, "internal_error", e.what()});
      }
      f->local = nullptr;
      answer(f, std::move(local), true);
    });
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  std::exchange(f->respond, nullptr)(std::move(a));
}

}  // namespace delayq::server
