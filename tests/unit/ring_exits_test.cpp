// The ring allreduce under entry skew (ring_exits.h) against hand-computed exits: equal entries
// give the round model's ring_allreduce_time; a late member makes its predecessor's waiting blocks
// share one link.
#include "atoll/wan/ring_exits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "atoll/wan/round_model.h"
#include "atoll/wan/topology.h"

namespace {
using namespace atl::wan;

// A-B 10 ms, B-C 20 ms, A-C 30 ms, 1 GB/s links everywhere.
Topology three() {
  std::vector<Site> sites;
  for (char c : {'A', 'B', 'C'}) {
    Site s;
    s.code = s.name = std::string(1, c);
    s.continent = "X";
    s.egress_bytes_per_s = s.ingress_bytes_per_s = 1e9;
    s.fpga_memory_bytes = 1 << 30;
    sites.push_back(s);
  }
  Topology t(sites);
  t.set_latency_matrix({0, 0.010, 0.030, 0.010, 0, 0.020, 0.030, 0.020, 0});
  return t;
}

RoundOptions payload(double bytes) {
  RoundOptions o;
  o.payload_bytes = bytes;
  return o;
}

void expect_exits(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << "member " << i;
}

TEST(RingExits, EqualEntriesGiveTheRoundModel) {
  const auto t = three();
  // Ring A->B->C->A, 4 steps of 10 MB (10 ms each), worked out by hand: A's last block arrives
  // from C at 130 ms; B's from A at 100 ms, and its own last send lands at C at 120 ms; C's
  // arrives at 130 ms. The latest is the round model's 90 + 40 ms.
  const std::vector<double> zero(3, 0.0);
  const auto exits = ring_allreduce_exits(t, {0, 1, 2}, payload(3e7), zero);
  expect_exits(exits, {0.130, 0.120, 0.130});
  EXPECT_NEAR(*std::max_element(exits.begin(), exits.end()),
              ring_allreduce_time(t, {0, 1, 2}, payload(3e7)), 1e-9);
  // Shifting every entry shifts every exit.
  const auto later = ring_allreduce_exits(t, {0, 1, 2}, payload(3e7), std::vector<double>(3, 5.0));
  expect_exits(later, {5.130, 5.120, 5.130});
}

TEST(RingExits, ALateMemberMakesWaitingBlocksShareALink) {
  const auto t = three();
  // C enters at 200 ms. B's blocks of steps 0 and 1 wait for C's receives (rendezvous) and then
  // cross B's link together at half the rate each: both land at 240 ms (not 230 and 240); C, which
  // then has both, sends its steps 1 and 2 together (land 290 ms); and so on (worked out by hand):
  // exits 330, 350, 350 ms, 150 ms after the latest entry where entering together takes 130.
  const auto exits =
      ring_allreduce_exits(t, {0, 1, 2}, payload(3e7), std::vector<double>{0.0, 0.0, 0.2});
  expect_exits(exits, {0.330, 0.350, 0.350});
}

TEST(RingExits, SmallBlocksAreSentDetached) {
  const auto t = three();
  // 3 KB: blocks of 1 µs (u), sent detached (a member leaves at its last receive), each moving
  // once its receiver has entered. C enters at 200 ms: B's steps 0 and 1 cross B's link together
  // (land at 220 ms + 2u), C's steps 1 and 2 together (250 ms + 4u), A's steps 2 and 3 together
  // (260 ms + 6u); then B's step 3 lands at 280 ms + 7u and C's at 290 ms + 4u. By hand.
  const double u = 1e-6;
  const auto exits =
      ring_allreduce_exits(t, {0, 1, 2}, payload(3e3), std::vector<double>{0.0, 0.0, 0.2});
  expect_exits(exits, {0.290 + 4 * u, 0.260 + 6 * u, 0.280 + 7 * u});
}

TEST(RingExits, RefusesEntriesOfAnotherSize) {
  EXPECT_THROW(ring_allreduce_exits(three(), {0, 1, 2}, payload(1), std::vector<double>{0.0, 0.0}),
               std::invalid_argument);
  const std::vector<double> one{7.0};
  EXPECT_EQ(ring_allreduce_exits(three(), {1}, payload(1), one), one);
}

}  // namespace
