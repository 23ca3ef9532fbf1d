#include "atoll/localsgd/clique_penalty.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace atl::localsgd {

CliquePenalty::CliquePenalty(std::vector<Segment> segments, std::size_t layers,
                             const PenaltyOptions& options)
    : segments_(std::move(segments)), options_(options) {
  options_.validate();
  for (const auto& s : segments_) {
    if (s.layer >= layers || s.end < s.begin) {
      throw std::invalid_argument("clique penalty: a segment outside the layers");
    }
  }
  detectors_.assign(layers, EwmaAnomalyDetector(options.ewma_alpha, options.anomaly_threshold,
                                                static_cast<std::size_t>(options.ewma_warmup)));
}

// Each layer's ||θ̄ − θ|| (squares summed in double, as EDiT's norms); without an anchor, ||θ||.
std::vector<double> CliquePenalty::norms_of(std::span<const float> anchor,
                                            std::span<const float> theta) const {
  std::vector<double> norms(detectors_.size(), 0.0);
  for (const auto& s : segments_) {
    double sum = 0;
    for (std::size_t i = s.begin; i < s.end; ++i) {
      const float d = anchor.empty() ? theta[i] : anchor[i] - theta[i];
      sum += double(d) * d;
    }
    norms[s.layer] += sum;
  }
  for (auto& x : norms) x = std::sqrt(x);
  return norms;
}

CliquePenalty::Outcome CliquePenalty::meet(comm::Communicator& clique, CliqueOuterState& state,
                                           std::span<float> theta, double lr, double momentum,
                                           CliqueExchange exchange,
                                           std::span<const std::uint64_t> member_steps,
                                           double step_weight) {
  const auto& anchor = state.anchor();
  if (theta.size() != anchor.size()) {
    throw std::invalid_argument("clique penalty: the parameters' size differs from the anchor's");
  }
  Outcome out;
  const std::size_t k = static_cast<std::size_t>(clique.size()), L = detectors_.size();
  if (k < 2) return out;
  // This site's norms and its own detectors' verdicts, shared: [norms L, outlier flags L].
  auto mine = norms_of(anchor, theta);
  mine.resize(2 * L);
  for (std::size_t l = 0; l < L; ++l) mine[L + l] = detectors_[l].observe(mine[l]) ? 1.0 : 0.0;
  const auto all = clique.allgather_each<double>(mine);  // member-major
  std::vector<float> weight(L);                          // this member's weight per layer
  std::vector<bool> skipped(L, false);
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<double> norms(k);
    std::vector<bool> outlier(k);
    for (std::size_t m = 0; m < k; ++m) {
      norms[m] = all[m * 2 * L + l];
      outlier[m] = all[m * 2 * L + L + l] != 0.0;
    }
    auto d = penalty_weights(norms, outlier, options_.weight_temperature);
    if (step_weight > 0) d.weights = apply_step_weighting(d, member_steps, step_weight);
    for (auto m : d.dropped) out.dropped.emplace_back(l, static_cast<int>(m));
    if (d.skip) {
      out.skipped.push_back(l);
      skipped[l] = true;
    }
    out.max_weight += *std::max_element(d.weights.begin(), d.weights.end()) / double(L);
    weight[l] = static_cast<float>(d.weights[static_cast<std::size_t>(clique.rank())]);
  }
  // θ_C = Σ_j w_j θ_j, layer by layer (exact zeros from a member of weight 0).
  std::vector<float> payload(theta.size(), 0.0f);
  for (const auto& s : segments_) {
    const float w = weight[s.layer];
    if (w == 0.0f) continue;
    for (std::size_t i = s.begin; i < s.end; ++i) payload[i] = w * theta[i];
  }
  weighted_sum(clique, payload, 1.0f, exchange);
  // Δ = θ̄ − θ_C, clipped per layer; a skipped layer keeps its anchor and momentum.
  for (std::size_t i = 0; i < theta.size(); ++i) payload[i] = anchor[i] - payload[i];
  const auto delta_norms = norms_of({}, payload);
  std::vector<float> saved_anchor, saved_momentum;  // only when some layer is skipped
  if (!out.skipped.empty()) {
    saved_anchor = anchor;
    saved_momentum = state.momentum();
  }
  for (const auto& s : segments_) {
    const auto c =
        static_cast<float>(LayerPenalty::clip_scale(delta_norms[s.layer], options_.clip));
    if (c == 1.0f) continue;
    for (std::size_t i = s.begin; i < s.end; ++i) payload[i] *= c;
  }
  state.step(theta, payload, lr, momentum);
  for (const auto& s : segments_) {
    if (!skipped[s.layer]) continue;
    std::copy(saved_anchor.begin() + s.begin, saved_anchor.begin() + s.end,
              state.anchor().begin() + s.begin);
    std::copy(saved_momentum.begin() + s.begin, saved_momentum.begin() + s.end,
              state.momentum().begin() + s.begin);
    std::copy(saved_anchor.begin() + s.begin, saved_anchor.begin() + s.end,
              theta.begin() + s.begin);
  }
  return out;
}

std::vector<double> CliquePenalty::save() const {
  std::vector<double> out{static_cast<double>(detectors_.size())};
  for (const auto& d : detectors_) d.save(out);
  return out;
}

void CliquePenalty::load(std::span<const double> state) {
  if (state.empty() || state[0] != static_cast<double>(detectors_.size())) {
    throw std::invalid_argument(
        fmt::format("the checkpoint's site penalty has {} layers, this model {}",
                    state.empty() ? 0.0 : state[0], detectors_.size()));
  }
  auto loaded = detectors_;
  std::size_t pos = 1;
  for (auto& d : loaded) d.load(state, pos);
  if (pos != state.size()) throw std::invalid_argument("the checkpoint's site penalty is too long");
  detectors_ = std::move(loaded);
}

}  // namespace atl::localsgd
