#include "delayq/executor.hpp"

#include <algorithm>

namespace delayq {
namespace {

// Adapts a plain function to the executor interface, for make(): the engine
// itself calls plain functions directly (see executor_factory::find()).
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

executor_factory::binding executor_factory::entry::bind() const noexcept {
  binding b;
  if (fn)
    b.fn = fn.get();
  else if (make)
    b.make = &make;
  else if (async_fn)
    b.async_fn = async_fn.get();
  else if (async_make)
    b.async_make = &async_make;
  if (b.async_fn || b.async_make) b.start = start;
  return b;
}

executor_factory::entry& executor_factory::slot(std::string type) {
  entry& e = entries_[std::move(type)];
  e = entry{};  // a new registration replaces whatever kind was there
  return e;
}

executor_factory& executor_factory::add(std::string type, maker m) {
  slot(std::move(type)).make = std::move(m);
  return *this;
}

executor_factory& executor_factory::add(std::string type, function fn) {
  slot(std::move(type)).fn = std::make_shared<const function>(std::move(fn));
  return *this;
}

executor_factory& executor_factory::add_async(std::string type, async_maker m, async_start how) {
  entry& e = slot(std::move(type));
  e.async_make = std::move(m);
  e.start = how;
  return *this;
}

executor_factory& executor_factory::add_async(std::string type, async_function fn,
                                              async_start how) {
  entry& e = slot(std::move(type));
  e.async_fn = std::make_shared<const async_function>(std::move(fn));
  e.start = how;
  return *this;
}

executor_factory& executor_factory::set_fallback(maker m) {
  fallback_ = entry{};
  fallback_.make = std::move(m);
  return *this;
}

executor_factory& executor_factory::set_fallback(function fn) {
  fallback_ = entry{};
  fallback_.fn = std::make_shared<const function>(std::move(fn));
  return *this;
}

executor_factory& executor_factory::set_fallback_async(async_maker m, async_start how) {
  fallback_ = entry{};
  fallback_.async_make = std::move(m);
  fallback_.start = how;
  return *this;
}

executor_factory& executor_factory::set_fallback_async(async_function fn, async_start how) {
  fallback_ = entry{};
  fallback_.async_fn = std::make_shared<const async_function>(std::move(fn));
  fallback_.start = how;
  return *this;
}

executor_factory::binding executor_factory::find(std::string_view type) const {
  auto it = entries_.find(type);
  return it != entries_.end() ? it->second.bind() : fallback_.bind();
}

std::unique_ptr<executor> executor_factory::make(std::string_view type) const {
  const binding b = find(type);
  if (b.fn) {
    auto it = entries_.find(type);
    const entry& e = it != entries_.end() ? it->second : fallback_;
    return std::make_unique<function_executor>(e.fn);
  }
  if (b.make && *b.make) return (*b.make)();
  return nullptr;
}

std::unique_ptr<async_executor> executor_factory::make_async(std::string_view type) const {
  const binding b = find(type);
  if (b.async_fn) {
    auto it = entries_.find(type);
    const entry& e = it != entries_.end() ? it->second : fallback_;
    return std::make_unique<async_function_executor>(e.async_fn);
  }
  if (b.async_make && *b.async_make) return (*b.async_make)();
  return nullptr;
}

bool executor_factory::contains(std::string_view type) const {
  return static_cast<bool>(find(type));
}

std::vector<std::string> executor_factory::types() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [type, e] : entries_) out.push_back(type);
  return out;  // a std::map: sorted already
}

}  // namespace delayq
