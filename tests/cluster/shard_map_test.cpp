// The shard map and cluster_options, without a server: shard_of() and
// rendezvous_owner() against fixed vectors (computed by an independent Python
// implementation of the documented hashes), their spread, and validation.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "delayq/redis_shard_leases.hpp"
#include "delayq/shard_leases.hpp"

using namespace delayq;
using namespace std::chrono_literals;

TEST_CASE("shard map: shard_of never changes (fixed vectors)") {
  struct vec {
    const char* id;
    std::uint32_t of64, of16384, of7;
  };
  // python3: fmix64(fnv1a64(id.encode())) % n
  const vec vectors[] = {
      {"", 38, 10534, 1},
      {"a", 27, 3675, 1},
      {"!", 21, 4629, 1},  // 0x21 and 0x61 share their low 6 bits; FNV-1a alone mixes them not
      {"order-1", 37, 6565, 1},
      {"order-2", 43, 7083, 5},
      {"task:42", 41, 1321, 6},
      {"0", 44, 6956, 0},
      {"\xc3\xbf", 50, 7538, 3},
      {"a-very-long-task-id-with-many-characters-0123456789", 25, 14297, 5},
  };
  for (const vec& v : vectors) {
    CAPTURE(v.id);
    CHECK(shard_of(v.id, 64) == v.of64);
    CHECK(shard_of(v.id, 16384) == v.of16384);
    CHECK(shard_of(v.id, 7) == v.of7);
    CHECK(shard_of(v.id, 1) == 0);
  }
}

TEST_CASE("shard map: shard_of spreads ids evenly") {
  for (const std::uint32_t shards : {64u, 100u, 1024u}) {
    CAPTURE(shards);
    const int ids = 200'000;
    std::vector<int> count(shards);
    for (int i = 0; i < ids; ++i) ++count[shard_of("task-" + std::to_string(i), shards)];
    const double mean = static_cast<double>(ids) / shards;
    const auto [lo, hi] = std::minmax_element(count.begin(), count.end());
    // Binomial: the standard deviation is about sqrt(mean); 25 % is over 6 of them.
    CHECK(*lo > mean * 0.75);
    CHECK(*hi < mean * 1.25);
  }
}

TEST_CASE("shard map: rendezvous_owner is fixed and moves only the joiner's share") {
  const std::vector<std::string> abg{"alpha", "beta", "gamma"};
  // python3: max(members, key=weight(member, shard))
  const char* expected[] = {"alpha", "alpha", "beta", "beta",  "gamma",
                            "alpha", "beta",  "beta", "gamma", "gamma"};
  for (std::uint32_t s = 0; s < 10; ++s) CHECK(abg[rendezvous_owner(s, abg)] == expected[s]);
  // The order members are listed in does not matter.
  const std::vector<std::string> gba{"gamma", "beta", "alpha"};
  for (std::uint32_t s = 0; s < 1000; ++s)
    CHECK(abg[rendezvous_owner(s, abg)] == gba[rendezvous_owner(s, gba)]);
  CHECK(rendezvous_owner(3, std::vector<std::string>{}) == 0);

  // A join moves only shards to the joiner, about 1/N of them.
  const std::vector<std::string> abgd{"alpha", "beta", "gamma", "delta"};
  int moved = 0;
  for (std::uint32_t s = 0; s < 4096; ++s) {
    const std::string& before = abg[rendezvous_owner(s, abg)];
    const std::string& after = abgd[rendezvous_owner(s, abgd)];
    if (before == after) continue;
    ++moved;
    CHECK(after == "delta");
  }
  CHECK(moved > 4096 / 4 * 3 / 4);
  CHECK(moved < 4096 / 4 * 5 / 4);
}

TEST_CASE("cluster options: validation") {
  boost::system::error_code ec;
  std::string why;
  cluster_options o;
  o.validate(ec, &why);
  CHECK_FALSE(ec);

  auto refused = [&](cluster_options bad, const char* word) {
    ec = {};
    why.clear();
    bad.validate(ec, &why);
    CHECK(ec == errc::invalid_cluster_options);
    CHECK(why.find(word) != std::string::npos);
    CHECK_THROWS_AS(bad.validate(), boost::system::system_error);
    CHECK(make_redis_shard_leases(redis_options{}, bad, ec) == nullptr);
    CHECK(ec == errc::invalid_cluster_options);
  };
  o = {};
  o.shards = 0;
  refused(o, "shards");
  o.shards = 16385;
  refused(o, "shards");
  o = {};
  o.lease = 199ms;
  refused(o, "lease");
  o.lease = 10min + 1ms;
  refused(o, "lease");
  o = {};
  o.instance = std::string(129, 'x');
  refused(o, "128");
  o.instance = "has space";
  refused(o, "instance");
  o.instance = "tab\t";
  refused(o, "instance");
  o.instance = "caf\xc3\xa9";
  refused(o, "instance");

  // The bounds themselves are accepted.
  for (const cluster_options& good :
       {cluster_options{1, 200ms, "a"}, cluster_options{16384, 10min, std::string(128, '~')},
        cluster_options{64, 5s, "host-1:4242"}}) {
    ec = {};
    good.validate(ec);
    CHECK_FALSE(ec);
  }
  CHECK(make_error_code(errc::invalid_cluster_options).message().find("16384") !=
        std::string::npos);
}

TEST_CASE("cluster options: an empty instance name becomes hostname:pid") {
  const std::string name = default_instance_name();
  CHECK(name.ends_with(":" + std::to_string(::getpid())));
  cluster_options o;
  o.instance = name;
  CHECK_NOTHROW(o.validate());
  auto leases = make_redis_shard_leases(redis_options{}, cluster_options{});
  CHECK(leases->options().instance == name);
  CHECK(leases->options().shards == 64);
}
