#include "delayq/executor.hpp"

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

}  // namespace

executor_factory& executor_factory::add(std::string type, maker m) {
  makers_.insert_or_assign(std::move(type), std::move(m));
  return *this;
}

executor_factory& executor_factory::add(std::string type, function fn) {
  auto shared = std::make_shared<const function>(std::move(fn));
  return add(std::move(type),
             maker{[shared] { return std::make_unique<function_executor>(shared); }});
}

std::unique_ptr<executor> executor_factory::make(std::string_view type) const {
  auto it = makers_.find(type);
  if (it == makers_.end() || !it->second) return nullptr;
  return it->second();
}

bool executor_factory::contains(std::string_view type) const {
  return makers_.find(type) != makers_.end();
}

std::vector<std::string> executor_factory::types() const {
  std::vector<std::string> out;
  out.reserve(makers_.size());
  for (const auto& [type, m] : makers_) out.push_back(type);
  return out;
}

}  // namespace delayq
