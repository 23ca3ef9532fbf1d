// EDiT's pseudo-gradient penalty across sites (docs/wan-train.md, `--strategy edit --topology`):
// clique averaging (clique_sync.h) with EDiT's per-layer weights. Each site keeps the anomaly
// detectors of its own norm series, one per layer (unit), as EDiT's detector of worker i sees
// worker i's norms only. At a meeting each member computes its norms n_l = ||θ̄ − θ||_l, its
// detectors flag its own outliers (a non-finite norm is one), and the members allgather norms and
// flags; then, per layer, every member computes the same weights, softmax(−n_j/T) over the
// members that are not outliers (penalty.h), and the clique forms θ_C,l = Σ_j w_j,l θ_j,l (a
// member of weight 0 sends exact zeros). Each member's Δ_l = θ̄_l − θ_C,l is clipped to
// min(1, τ/(||Δ_l|| + 1e-6)) and takes the outer step; a layer whose members are all outliers
// keeps its anchor and momentum (the members restart it from the anchor). Under an all-to-all
// schedule (one anchor) θ̄ − Σ w_j θ_j = Σ w_j Δ_j: EDiT's weighted, clipped average. Free of
// LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/localsgd/clique_sync.h"
#include "atoll/localsgd/penalty.h"

namespace atl::localsgd {

class CliquePenalty {
 public:
  // A run of the flat parameters that belongs to one layer.
  struct Segment {
    std::size_t begin = 0, end = 0;
    std::size_t layer = 0;
  };
  // `segments` cover the flat parameters; `layers` > every segment's layer. Throws
  // std::invalid_argument on invalid options.
  CliquePenalty(std::vector<Segment> segments, std::size_t layers, const PenaltyOptions& options);

  struct Outcome {
    std::vector<std::pair<std::size_t, int>> dropped;  // (layer, clique rank) weighted 0
    std::vector<std::size_t> skipped;                  // layers with no member kept
    double max_weight = 0;                             // mean over layers of the largest weight
  };
  // One meeting of this site's clique (collective over `clique`): the weights, θ_C, the clipped
  // outer step on `state` and theta := θ̄. A clique of one site changes nothing. A-EDiT's
  // --step-weight r: `member_steps` (by clique rank, the same on every member) reweighs each
  // layer's weights by the members' local steps (apply_step_weighting in penalty.h).
  Outcome meet(comm::Communicator& clique, CliqueOuterState& state, std::span<float> theta,
               double lr, double momentum, CliqueExchange exchange,
               std::span<const std::uint64_t> member_steps = {}, double step_weight = 0);

  std::size_t layers() const { return detectors_.size(); }
  // Flat state: [layers, then one EwmaAnomalyDetector record per layer]. load() throws
  // std::invalid_argument on another shape or a corrupt record (*this unchanged).
  std::vector<double> save() const;
  void load(std::span<const double> state);

 private:
  std::vector<double> norms_of(std::span<const float> anchor, std::span<const float> theta) const;

  std::vector<Segment> segments_;
  PenaltyOptions options_;
  std::vector<EwmaAnomalyDetector> detectors_;
};

}  // namespace atl::localsgd
