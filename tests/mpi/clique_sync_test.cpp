// Clique averaging (atoll/localsgd/clique_sync.h) under mpirun: a clique's average is the mean of
// its members' parameters (3 sites, hand values, with and without outer momentum), and with
// outer lr 1, momentum 0 and no training between rounds, 9 sites on the affine-plane triads
// (rows, then columns of a 3 × 3 grid) all hold the global mean after the number of rounds the
// mixing analysis (atoll/wan/mixing.h) predicts, and not before.
#include "atoll/localsgd/clique_sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "atoll/localsgd/clique_penalty.h"
#include "atoll/wan/mixing.h"
#include "mpi_test_main.h"

namespace {

atl::comm::Communicator* g_comm = nullptr;
using atl::localsgd::CliqueOuterState;

// This rank's clique in `round` as a sub-communicator (ranks in no clique: alone).
atl::comm::Communicator clique_of(const atl::wan::Partition& round) {
  const int me = g_comm->rank();
  for (std::size_t c = 0; c < round.size(); ++c)
    for (auto s : round[c])
      if (static_cast<int>(s) == me) return g_comm->split(static_cast<int>(c), me);
  return g_comm->split(static_cast<int>(round.size()) + me, me);
}

TEST(CliqueSync, ThreeSitesHandValues) {
  if (g_comm->size() != 3) GTEST_SKIP() << "needs 3 ranks";
  const float r = static_cast<float>(g_comm->rank());
  auto all = clique_of({{0, 1, 2}});
  // Anchors (1, 1) everywhere; working parameters (r, 2r): θ_C = (1, 2).
  std::vector<float> theta{r, 2 * r};
  CliqueOuterState gossip(std::vector<float>{1, 1});
  gossip.sync(all, theta, 1.0, 0.0);  // lr 1, μ 0: θ̄ = θ = θ_C
  EXPECT_EQ(theta, (std::vector<float>{1, 2}));
  EXPECT_EQ(gossip.anchor(), (std::vector<float>{1, 2}));
  // lr 0.5, μ 0.9: Δ = θ̄ − θ_C = (0, −1), m = Δ, θ̄ = (1, 1) − 0.5·1.9·Δ = (1, 1.95).
  theta = {r, 2 * r};
  CliqueOuterState outer(std::vector<float>{1, 1});
  outer.sync(all, theta, 0.5, 0.9);
  EXPECT_FLOAT_EQ(theta[0], 1.0f);
  EXPECT_FLOAT_EQ(theta[1], 1.95f);
  EXPECT_FLOAT_EQ(outer.momentum()[1], -1.0f);
  // The full-mesh exchange (the unicast transport): the same numbers.
  theta = {r, 2 * r};
  CliqueOuterState mesh(std::vector<float>{1, 1});
  mesh.sync(all, theta, 0.5, 0.9, atl::localsgd::CliqueExchange::full_mesh);
  EXPECT_FLOAT_EQ(theta[0], 1.0f);
  EXPECT_FLOAT_EQ(theta[1], 1.95f);
  // The pipelined ring (the ring transport): the same numbers.
  theta = {r, 2 * r};
  CliqueOuterState ring(std::vector<float>{1, 1});
  ring.sync(all, theta, 0.5, 0.9, atl::localsgd::CliqueExchange::ring);
  EXPECT_FLOAT_EQ(theta[0], 1.0f);
  EXPECT_FLOAT_EQ(theta[1], 1.95f);
  // A pair and an idle site: sites 0 and 2 average (0, 0) and (2, 4); site 1 keeps (1, 1).
  auto pair = clique_of({{0, 2}});
  theta = {r, r * r};
  CliqueOuterState partial(theta);
  partial.sync(pair, theta, 1.0, 0.0);
  const std::vector<float> kept{1, 1}, averaged{1, 2};
  EXPECT_EQ(theta, g_comm->rank() == 1 ? kept : averaged);
}

// A member whose parameters hold a NaN or an infinity is dropped: the others' mean is every
// member's θ_C, on every exchange; with no finite member the meeting is skipped.
TEST(CliqueSync, NonFiniteMemberDropped) {
  if (g_comm->size() != 3) GTEST_SKIP() << "needs 3 ranks";
  const int me = g_comm->rank();
  const float r = static_cast<float>(me);
  auto all = clique_of({{0, 1, 2}});
  using atl::localsgd::CliqueExchange;
  for (auto exchange :
       {CliqueExchange::allreduce, CliqueExchange::full_mesh, CliqueExchange::ring}) {
    // Sites 0 and 2 hold (0, 0) and (2, 4): θ_C = (1, 2); site 1's NaN (or infinity) is dropped.
    std::vector<float> theta{r, 2 * r};
    if (me == 1) theta[1] = exchange == CliqueExchange::ring ? INFINITY : NAN;
    CliqueOuterState state(std::vector<float>{1, 1});
    const auto meeting = state.sync(all, theta, 1.0, 0.0, exchange);
    EXPECT_EQ(meeting.dropped, std::vector<int>{1});
    EXPECT_FALSE(meeting.skipped);
    EXPECT_EQ(theta, (std::vector<float>{1, 2}));
    EXPECT_EQ(state.anchor(), (std::vector<float>{1, 2}));
    // No finite member: nothing changes but the working parameters, back at the anchor.
    theta = {NAN, r};
    CliqueOuterState none(std::vector<float>{5, 6});
    const auto skipped = none.sync(all, theta, 1.0, 0.0, exchange);
    EXPECT_TRUE(skipped.skipped);
    EXPECT_EQ(skipped.dropped, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(theta, (std::vector<float>{5, 6}));
    EXPECT_EQ(none.anchor(), (std::vector<float>{5, 6}));
  }
  // All finite: nothing dropped.
  std::vector<float> theta{r, r};
  CliqueOuterState fine(theta);
  EXPECT_TRUE(fine.sync(all, theta, 1.0, 0.0).dropped.empty());
}

// EDiT's penalty by clique (atoll/localsgd/clique_penalty.h), 3 sites, one layer, hand values:
// anchors (1, 1), θ_r = (1 − r, 1), so the norms are r and the weights softmax(−r) (T = 1);
// θ_C = Σ w_j θ_j; with a clip the step is scaled; a NaN member is dropped in the layer.
TEST(CliqueSync, PenaltyWeighsByNorms) {
  if (g_comm->size() != 3) GTEST_SKIP() << "needs 3 ranks";
  const int me = g_comm->rank();
  auto all = clique_of({{0, 1, 2}});
  using atl::localsgd::CliquePenalty;
  atl::localsgd::PenaltyOptions options;
  options.ewma_warmup = 5;  // warming up: no detection from the norms
  const std::vector<CliquePenalty::Segment> layer0{{0, 2, 0}};
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  const double pulled = (e1 + 2 * e2) / (1 + e1 + e2);  // Σ w_j·j: θ_C[0] = 1 − pulled
  for (auto exchange :
       {atl::localsgd::CliqueExchange::allreduce, atl::localsgd::CliqueExchange::full_mesh,
        atl::localsgd::CliqueExchange::ring}) {
    CliquePenalty penalty(layer0, 1, options);
    CliqueOuterState state(std::vector<float>{1, 1});
    std::vector<float> theta{1.0f - static_cast<float>(me), 1};
    const auto out = penalty.meet(all, state, theta, 1.0, 0.0, exchange);
    EXPECT_TRUE(out.dropped.empty());
    EXPECT_NEAR(theta[0], 1.0 - pulled, 1e-6);
    EXPECT_FLOAT_EQ(theta[1], 1.0f);
    EXPECT_NEAR(out.max_weight, 1 / (1 + e1 + e2), 1e-12);
  }
  // aedit --step-weight 0.5 with steps (2, 1, 1): w'_j = w_j / 2 + s_j / 8.
  {
    CliquePenalty penalty(layer0, 1, options);
    CliqueOuterState state(std::vector<float>{1, 1});
    std::vector<float> theta{1.0f - static_cast<float>(me), 1};
    const std::vector<std::uint64_t> steps{2, 1, 1};
    penalty.meet(all, state, theta, 1.0, 0.0, atl::localsgd::CliqueExchange::full_mesh, steps, 0.5);
    EXPECT_NEAR(theta[0], 1.0 - (pulled / 2 + (0 * 2 + 1 * 1 + 2 * 1) / 8.0), 1e-6);
  }
  // --clip τ = pulled / 2: Δ = (pulled, 0) is halved.
  options.clip = pulled / 2;
  CliquePenalty clipped(layer0, 1, options);
  CliqueOuterState state(std::vector<float>{1, 1});
  std::vector<float> theta{1.0f - static_cast<float>(me), 1};
  clipped.meet(all, state, theta, 1.0, 0.0, atl::localsgd::CliqueExchange::allreduce);
  EXPECT_NEAR(theta[0], 1.0 - pulled / 2, 1e-5);
  // Member 2's NaN: its norm is an outlier, the weights are softmax over members 0 and 1.
  options.clip = 0;
  CliquePenalty nan(layer0, 1, options);
  CliqueOuterState nan_state(std::vector<float>{1, 1});
  theta = {me == 2 ? NAN : 1.0f - static_cast<float>(me), 1};
  const auto out = nan.meet(all, nan_state, theta, 1.0, 0.0, atl::localsgd::CliqueExchange::ring);
  EXPECT_EQ(out.dropped, (std::vector<std::pair<std::size_t, int>>{{0, 2}}));
  EXPECT_NEAR(theta[0], 1.0 - e1 / (1 + e1), 1e-6);
  // Save and load give the same detectors.
  CliquePenalty copy(layer0, 1, options);
  copy.load(nan.save());
  EXPECT_EQ(copy.save(), nan.save());
}

TEST(CliqueSync, TriadsReachConsensusWhenMixingSaysSo) {
  if (g_comm->size() != 9) GTEST_SKIP() << "needs 9 ranks";
  const atl::wan::Schedule triads{{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}},
                                  {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}};
  const auto predicted = atl::wan::rounds_to_consensus(triads, 9, 1e-6);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_EQ(*predicted, 2u);
  std::vector<atl::comm::Communicator> cliques;
  for (const auto& round : triads) cliques.push_back(clique_of(round));
  std::mt19937 rng(static_cast<unsigned>(g_comm->rank()) + 1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> theta(257);
  for (auto& x : theta) x = u(rng);
  std::vector<float> mean = theta;
  atl::localsgd::average(*g_comm, mean);
  CliqueOuterState state(theta);
  for (std::size_t t = 0; t < *predicted; ++t) {
    // Before the predicted round, some site still differs from the mean somewhere.
    double off = 0;
    for (std::size_t i = 0; i < theta.size(); ++i)
      off = std::max(off, double(std::abs(theta[i] - mean[i])));
    off = g_comm->allreduce_value(off, atl::comm::ReduceOp::max);
    EXPECT_GT(off, 1e-3) << "consensus before round " << t + 1;
    state.sync(cliques[t % cliques.size()], theta, 1.0, 0.0);
  }
  for (std::size_t i = 0; i < theta.size(); ++i) EXPECT_NEAR(theta[i], mean[i], 1e-6) << i;
}

}  // namespace

int main(int argc, char** argv) { return atl::testing::run_mpi_tests(argc, argv, g_comm); }
