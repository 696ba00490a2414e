// delayq/detail/schedule_completion.hpp - how engine::async_schedule() hands
// a completion handler to the engine's (non-template) core.
#pragma once

#include "delayq/detail/boost_cxx20.hpp"  // first: Boost 1.74 + C++20

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <string>
#include <utility>

#include "delayq/direct_completion.hpp"

namespace delayq::detail {

/// How async_schedule() hands its completion to the engine, type-erased so
/// the engine's code is not a template. Called exactly once, from any thread.
class schedule_completion {
 public:
  virtual ~schedule_completion() = default;
  virtual void complete(boost::system::error_code ec, std::string id) = 0;
};

/// Posts the handler to its associated executor (the engine's by default),
/// which is kept from running out of work until then.
template <class Handler>
class schedule_completion_for final : public schedule_completion {
 public:
  schedule_completion_for(Handler h, const boost::asio::any_io_executor& fallback)
      : handler_(std::move(h)),
        work_(boost::asio::make_work_guard(
            boost::asio::get_associated_executor(handler_, fallback))) {}
  void complete(boost::system::error_code ec, std::string id) override {
    auto ex = work_.get_executor();
    boost::asio::post(ex, [h = std::move(handler_), ec, id = std::move(id)]() mutable {
      std::move(h)(ec, std::move(id));
    });
    work_.reset();
  }

 private:
  Handler handler_;
  boost::asio::executor_work_guard<
      boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>>
      work_;
};

/// A direct_completion is called where the outcome is known, unposted.
template <class F>
class schedule_completion_for<direct_completion<F>> final : public schedule_completion {
 public:
  schedule_completion_for(direct_completion<F> h, const boost::asio::any_io_executor&)
      : handler_(std::move(h)) {}
  void complete(boost::system::error_code ec, std::string id) override {
    handler_(ec, std::move(id));
  }

 private:
  direct_completion<F> handler_;
};

}  // namespace delayq::detail
