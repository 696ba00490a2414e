// persistence/roles/lease_book.cpp - see lease_book.hpp.
#include "lease_book.hpp"

#include <algorithm>

namespace delayq::detail {

lease_book::lease_book(cluster_options options) : options_(std::move(options)) {}

void lease_book::set_members(std::vector<std::pair<std::string, std::int64_t>> members,
                             std::int64_t now, clock::time_point read_at) {
  std::vector<std::string> names;
  std::optional<std::int64_t> first;
  for (auto& [name, expiry] : members) {
    if (name != options_.instance) first = std::min(expiry, first.value_or(expiry));
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  first_lapse_.reset();
  if (first)
    first_lapse_ = read_at + std::chrono::milliseconds{std::max<std::int64_t>(*first - now, 0)};
  // Rendezvous hashing costs shards x members hashes: only when they changed.
  if (names == members_ && !mine_.empty()) return;
  members_ = std::move(names);
  mine_.assign(options_.shards, false);
  for (std::uint32_t s = 0; s < options_.shards; ++s) {
    const std::size_t owner = rendezvous_owner(s, members_);
    mine_[s] = owner < members_.size() && members_[owner] == options_.instance;
  }
}

lease_round lease_book::finish(clock::time_point start,
                               const std::map<std::uint32_t, shard_lease>& before, bool failed) {
  const auto now = clock::now();
  // Without an answer we only know how long our leases surely last.
  if (failed) std::erase_if(held_, [&](const auto& h) { return h.second.valid_until <= now; });
  lease_round out;
  // A shard lost and taken again within the round has a new token: it is
  // reported both lost and gained, since what was done under the old token
  // is fenced now.
  for (const auto& [s, l] : held_) {
    out.held.push_back(l);
    const auto was = before.find(s);
    if (was == before.end() || was->second.token != l.token) out.gained.push_back(s);
  }
  for (const auto& [s, l] : before) {
    const auto now_held = held_.find(s);
    if (now_held == held_.end() || now_held->second.token != l.token) out.lost.push_back(s);
  }
  if (!failed) {
    out.members = members_;
    // What is held and not ours to own was kept (renew's keep).
    for (const auto& [s, l] : held_)
      if (!mine(s)) out.leaving.push_back(s);
  }
  const auto round = options_.lease / 3;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
  out.next_round_in = std::max(std::chrono::milliseconds{0}, round - spent);
  if (!failed && first_lapse_) {
    // A member whose heartbeat lapses before our next round gets a round of
    // ours just after: that round finds it gone and takes the shards it
    // should now own (its leases lapsed no later than its entry). The margin
    // covers the ms the store rounds its clock to.
    constexpr auto margin = std::chrono::milliseconds{2};
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(*first_lapse_ - now) + margin;
    if (until < out.next_round_in)
      out.next_round_in = std::max(until, std::chrono::milliseconds{1});
  }
  return out;
}

void lease_book::clear() {
  held_.clear();
  members_.clear();
  mine_.clear();
  first_lapse_.reset();
}

}  // namespace delayq::detail
