#include "delayq/executor.hpp"

#include <algorithm>

namespace delayq {
namespace {

// Adapts a plain function to the executor interface. The function object is
// shared by every attempt of its type, so wrapping it costs one small
// allocation per attempt and no copy of the user's callable.
class function_executor final : public executor {
 public:
  explicit function_executor(std::shared_ptr<const executor_factory::function> fn)
      : fn_(std::move(fn)) {}
  void execute(const task& t) override { (*fn_)(t); }

 private:
  std::shared_ptr<const executor_factory::function> fn_;
};

class async_function_executor final : public async_executor {
 public:
  explicit async_function_executor(std::shared_ptr<const executor_factory::async_function> fn)
      : fn_(std::move(fn)) {}
  void start(const task& t, completion done) override { (*fn_)(t, std::move(done)); }

 private:
  std::shared_ptr<const executor_factory::async_function> fn_;
};

}  // namespace

executor_factory& executor_factory::add(std::string type, maker m) {
  async_makers_.erase(type);
  makers_.insert_or_assign(std::move(type), std::move(m));
  return *this;
}

executor_factory& executor_factory::add_async(std::string type, async_maker m) {
  makers_.erase(type);
  async_makers_.insert_or_assign(std::move(type), std::move(m));
  return *this;
}

executor_factory& executor_factory::add_async(std::string type, async_function fn) {
  auto shared = std::make_shared<const async_function>(std::move(fn));
  return add_async(std::move(type), async_maker{[shared] {
                     return std::make_unique<async_function_executor>(shared);
                   }});
}

std::unique_ptr<async_executor> executor_factory::make_async(std::string_view type) const {
  auto it = async_makers_.find(type);
  if (it != async_makers_.end()) return it->second ? it->second() : nullptr;
  if (makers_.find(type) == makers_.end() && async_fallback_) return async_fallback_();
  return nullptr;
}

executor_factory& executor_factory::set_fallback(maker m) {
  async_fallback_ = nullptr;
  fallback_ = std::move(m);
  return *this;
}

executor_factory& executor_factory::set_fallback(function fn) {
  auto shared = std::make_shared<const function>(std::move(fn));
  return set_fallback(maker{[shared] { return std::make_unique<function_executor>(shared); }});
}

executor_factory& executor_factory::set_fallback_async(async_maker m) {
  fallback_ = nullptr;
  async_fallback_ = std::move(m);
  return *this;
}

executor_factory& executor_factory::set_fallback_async(async_function fn) {
  auto shared = std::make_shared<const async_function>(std::move(fn));
  return set_fallback_async(
      async_maker{[shared] { return std::make_unique<async_function_executor>(shared); }});
}

executor_factory& executor_factory::add(std::string type, function fn) {
  auto shared = std::make_shared<const function>(std::move(fn));
  return add(std::move(type),
             maker{[shared] { return std::make_unique<function_executor>(shared); }});
}

std::unique_ptr<executor> executor_factory::make(std::string_view type) const {
  auto it = makers_.find(type);
  if (it != makers_.end()) return it->second ? it->second() : nullptr;
  if (async_makers_.find(type) == async_makers_.end() && fallback_) return fallback_();
  return nullptr;
}

bool executor_factory::contains(std::string_view type) const {
  return has_fallback() || makers_.find(type) != makers_.end() ||
         async_makers_.find(type) != async_makers_.end();
}

std::vector<std::string> executor_factory::types() const {
  std::vector<std::string> out;
  out.reserve(makers_.size() + async_makers_.size());
  for (const auto& [type, m] : makers_) out.push_back(type);
  for (const auto& [type, m] : async_makers_) out.push_back(type);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace delayq
