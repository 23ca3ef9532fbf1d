// Decentralized local SGD with clique averaging (docs/wan-train.md): training across sites on a
// rotating-clique schedule. Site i keeps its own synchronized parameters θ̄_i (the anchor) and
// outer Nesterov momentum m_i. When the sites of a clique C meet, they average their working
// parameters, θ_C = (1/|C|) Σ_{j∈C} θ_j (members' anchors differ in general, so parameters are
// averaged, not pseudo-gradients), and each member takes its outer step against its own anchor:
//     Δ_i = θ̄_i − θ_C;  m_i ← μ·m_i + Δ_i;  θ̄_i ← θ̄_i − lr·(Δ_i + μ·m_i)   (μ = 0: θ̄_i − lr·Δ_i)
// and restarts from θ_i ← θ̄_i. Under an all-to-all schedule every anchor stays the same and
// Δ_i = θ̄ − mean_j θ_j = mean_j (θ̄ − θ_j): DiLoCo's averaged pseudo-gradient. With lr 1 and
// μ 0 it is pure gossip averaging, θ_i ← θ_C. A member whose parameters hold a NaN or an
// infinity is dropped from the mean (it sends exact zeros, the others share its weight) and takes
// the clique's mean as every member does; with no finite member the meeting is skipped (no outer
// step; every member restarts from its anchor). Free of LibTorch.
#pragma once

#include <span>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::localsgd {

// How a clique's members exchange their parameters (the same mean every way, up to rounding):
// `allreduce` (the MPI library's allreduce: what the FPGAs' in-network aggregation stands for),
// `full_mesh` (every member sends its whole payload to every other member, point to point, and
// each sums the k payloads in member order: the round model's unicast transport), or `ring`
// (the pipelined ring of Communicator::ring_allreduce in member order: the round model's ring), so
// that a simulation of a clique moves the bytes, in the pattern, that the model charges.
enum class CliqueExchange { allreduce, full_mesh, ring };

// What one meeting did.
struct CliqueMeeting {
  std::vector<int> dropped;  // the clique ranks whose parameters were not finite
  bool skipped = false;      // no finite member: no outer step
};

class CliqueOuterState {
 public:
  // The anchor θ̄ := theta, momentum 0.
  explicit CliqueOuterState(std::span<const float> theta);

  // One meeting of this site's clique (collective over `clique`, whose ranks are the clique's
  // sites): θ_C, the outer step on this site's anchor, and theta := θ̄. A clique of one site
  // changes nothing. std::invalid_argument if theta's size differs from the anchor's.
  CliqueMeeting sync(comm::Communicator& clique, std::span<float> theta, double lr, double momentum,
                     CliqueExchange exchange = CliqueExchange::allreduce);

  // The outer step with a given mean pseudo-gradient (the sparse path, where the clique sums
  // compressed Δ_j = θ̄ − θ_j against a common anchor): m ← μ·m + Δ; θ̄ ← θ̄ − lr·(Δ + μ·m);
  // theta := θ̄. std::invalid_argument on a size mismatch.
  void step(std::span<float> theta, std::span<const float> mean_delta, double lr, double momentum);

  const std::vector<float>& anchor() const { return anchor_; }
  std::vector<float>& anchor() { return anchor_; }
  const std::vector<float>& momentum() const { return momentum_; }
  std::vector<float>& momentum() { return momentum_; }

 private:
  std::vector<float> anchor_, momentum_;
};

// The mean over `comm`'s ranks of `values` (in place). Collective.
void average(comm::Communicator& comm, std::span<float> values,
             CliqueExchange exchange = CliqueExchange::allreduce);
// Σ over `comm`'s ranks of weight·values (in place; each rank its own weight, 0: exact zeros are
// sent, never 0·NaN). Collective.
void weighted_sum(comm::Communicator& comm, std::span<float> values, float weight,
                  CliqueExchange exchange = CliqueExchange::allreduce);

}  // namespace atl::localsgd
