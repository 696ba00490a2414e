// engine/src/shard_leases.cpp - the shard map, rendezvous hashing and the
// validation of cluster_options (see delayq/shard_leases.hpp).
#include "delayq/shard_leases.hpp"

#include <unistd.h>

#include <climits>
#include <string>

namespace delayq {
namespace {

constexpr std::uint64_t fnv_offset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t fnv_prime = 0x100000001b3ULL;

constexpr std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) noexcept {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= fnv_prime;
  }
  return h;
}

// MurmurHash3's 64-bit finalizer: every output bit depends on every input bit.
constexpr std::uint64_t fmix64(std::uint64_t k) noexcept {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

constexpr std::uint64_t weight(std::uint64_t member_state, std::uint32_t shard) noexcept {
  for (int i = 0; i < 4; ++i) {
    member_state ^= (shard >> (8 * i)) & 0xffU;
    member_state *= fnv_prime;
  }
  return fmix64(member_state);
}

constexpr std::uint32_t max_shards = 16384;
constexpr std::chrono::milliseconds min_lease{200};
constexpr std::chrono::milliseconds max_lease = std::chrono::minutes(10);
constexpr std::size_t max_instance = 128;

}  // namespace

void cluster_options::validate(boost::system::error_code& ec, std::string* message) const {
  ec = {};
  std::string why;
  if (shards < 1 || shards > max_shards) {
    why = "shards is " + std::to_string(shards) + "; it must be 1 to 16384";
  } else if (lease < min_lease || lease > max_lease) {
    why = "lease is " + std::to_string(lease.count()) + " ms; it must be 200 ms to 10 min";
  } else if (instance.size() > max_instance) {
    why = "the instance name has " + std::to_string(instance.size()) +
          " bytes; it may have 128 at most";
  } else {
    for (const char c : instance) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x21 || u > 0x7e) {
        why =
            "the instance name has a byte outside '!'..'~' (a space, a control "
            "character or non-ASCII): byte " +
            std::to_string(u);
        break;
      }
    }
  }
  if (why.empty()) return;
  ec = make_error_code(errc::invalid_cluster_options);
  if (message) *message = "invalid cluster options: " + why;
}

void cluster_options::validate() const {
  boost::system::error_code ec;
  std::string why;
  validate(ec, &why);
  if (ec) throw boost::system::system_error(ec, why);
}

std::string default_instance_name() {
  char host[HOST_NAME_MAX + 1] = {};
  std::string name;
  if (::gethostname(host, sizeof host - 1) == 0) name = host;
  // A host name is printable ASCII by RFC 1123, but this one came from the
  // system: keep only what validate() accepts.
  std::string clean;
  for (const char c : name)
    if (static_cast<unsigned char>(c) >= 0x21 && static_cast<unsigned char>(c) <= 0x7e)
      clean.push_back(c);
  if (clean.empty()) clean = "localhost";
  return clean.substr(0, 100) + ":" + std::to_string(::getpid());
}

std::uint32_t shard_of(std::string_view task_id, std::uint32_t shards) noexcept {
  if (shards == 0) return 0;
  return static_cast<std::uint32_t>(fmix64(fnv1a(fnv_offset, task_id)) % shards);
}

std::size_t rendezvous_owner(std::uint32_t shard, std::span<const std::string> members) noexcept {
  std::size_t best = members.size();
  std::uint64_t best_weight = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::uint64_t w = weight(fnv1a(fnv_offset, members[i]), shard);
    if (best == members.size() || w > best_weight ||
        (w == best_weight && members[i] < members[best])) {
      best = i;
      best_weight = w;
    }
  }
  return best;
}

lease_round shard_leases::renew() {
  boost::system::error_code ec;
  lease_round r = renew(ec);
  detail::throw_if(ec, "delayq: shard_leases::renew");
  return r;
}

void shard_leases::release_all() {
  boost::system::error_code ec;
  release_all(ec);
  detail::throw_if(ec, "delayq: shard_leases::release_all");
}

}  // namespace delayq
