// delayq/direct_completion.hpp - a completion the engine calls where the
// outcome is learnt, for callers that answer a request where they stand.
#pragma once

#include <boost/system/error_code.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace delayq {

/// Wraps a function `f(boost::system::error_code, std::string id)` as the
/// completion token of engine::async_schedule_at() and async_schedule(), so
/// that the engine calls it directly instead of posting it to an executor:
/// on the calling thread before async_schedule_at() returns when the outcome
/// is known at once (an in-process store such as memory_store, a refusal),
/// else on the thread that learns the store write's outcome. Either way no
/// lock of the engine is held, and a task of an immediate type
/// (async_start::immediate) that was due when its write landed has been
/// started already.
///
/// This is what a server wants whose connection answers where it stands
/// (delayq-server's HTTP and beanstalk listeners): no hand-off to another
/// thread and back per request. `f` must not block, and must not call an
/// engine function that waits for a store write (a blocking schedule,
/// cancel...). Unlike an ordinary Asio handler it may run before the
/// initiating call returns, so it must not take a lock that the caller
/// holds around the call.
///
/// Example:
/// \code
///   eng.async_schedule_at("mail", body, due, {}, delayq::direct([conn](auto ec, std::string id) {
///     conn->answer(ec ? 503 : 201, id);
///   }));
/// \endcode
///
/// Thread safety: called once, on whichever thread the outcome is known.
template <class F>
class direct_completion {
 public:
  explicit direct_completion(F f) : f_(std::move(f)) {}
  void operator()(boost::system::error_code ec, std::string id) { f_(ec, std::move(id)); }

 private:
  F f_;
};

/// Makes a direct_completion of `f`.
template <class F>
direct_completion<std::decay_t<F>> direct(F&& f) {
  return direct_completion<std::decay_t<F>>(std::forward<F>(f));
}

}  // namespace delayq
