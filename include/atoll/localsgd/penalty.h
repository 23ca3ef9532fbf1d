// EDiT's pseudo-gradient penalty (Cheng et al., "EDiT: A Local-SGD-Based Efficient Distributed
// Training Method for Large Language Models", arXiv 2412.07210, Sec. 3.3; notes/localsgd.md,
// "EDiT additions", item 3). Pure arithmetic: no communication, no tensors.
//
// At every outer (sync) step, for every layer l, each worker i contributes the norm n_i = ||Δ_i||
// of its pseudo-gradient for that layer (one allgather of L floats per worker). From those norms
// every rank of the sync group computes the same decision:
//   1. anomaly elimination: an online EWMA detector per (layer, worker) flags n_i when it lies far
//      above that worker's history; an outlier's Δ_i gets weight 0;
//   2. weighted averaging: w_i = softmax(−n_i / T) over the remaining workers, Δ̄ = Σ w_i Δ_i;
//   3. clipping after averaging: Δ̄ *= min(1, τ / (||Δ̄|| + 1e-6)).
// If every worker of a layer is an outlier, that layer's outer step is skipped (workers are still
// reset to θ̄).
//
// Determinism: decisions are a function of the options, the saved state and the sequence of norm
// vectors only (fixed summation order, no randomness, no clocks), so ranks that see the same
// allgather result agree bit for bit when they run the same binary (same libm exp/sqrt).
//
// Choices where the reference code (ATorch, atorch/local_sgd/anomaly_detection.py, class
// OnlineDynamicEWMA, and reduce_methods/base.py) is ambiguous or looks unintended:
//   - Initialisation: the first accepted observation sets μ = x, σ² = 0. The reference starts at
//     μ = 0, σ² = 0; with α = 0.02 the start-up transient from 0 still dominates σ after the
//     warm-up (0.98^120 ≈ 0.09 of the first norm is still in μ), hiding real spikes.
//   - Outliers (and non-finite norms) never update μ, σ², the z-score window or the warm-up count
//     (the notes: "pick one (exclude outliers)"). So warm-up = the first ewma_warmup *accepted*
//     observations; a NaN during warm-up is dropped and does not advance it.
//   - z = (x − μ)/σ is computed against the state before x. z = 0 when σ = 0 (no spread seen yet:
//     no evidence either way), as in the reference.
//   - The z-score window holds the z of the last W = ewma_warmup accepted, tested (post-warm-up)
//     observations, oldest first; its spread is the sample standard deviation (n − 1, as torch's
//     std()) and counts only with >= 2 entries. The reference also records zeros during warm-up.
//   - An outlier's weight is exactly 0 (the reference adds 1e6 to its norm before the softmax).
//   - Disabled penalty = plain averaging: weights 1/n, nothing dropped, no detector updates, and
//     non-finite norms are not looked at (they propagate like in plain averaging).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace atl::localsgd {

struct PenaltyOptions {
  bool enabled = true;              // false: plain averaging
  double anomaly_threshold = 3.0;   // --anomaly-threshold: z above threshold·factor is an outlier
  double ewma_alpha = 0.02;         // --ewma-alpha, in (0, 1)
  int ewma_warmup = 120;            // --ewma-warmup: accepted rounds before detection, and the
                                    // z-score window W (0: test from the 2nd round, factor 1)
  double weight_temperature = 1.0;  // --weight-temperature T, in units of the norm
  double clip = 0.0;                // --clip τ on ||Δ̄|| after averaging; 0 = off

  // nullopt if usable, else the first problem as a message naming the flag.
  std::optional<std::string> check() const;
  // Throws std::invalid_argument with check()'s message.
  void validate() const;
};

// Online EWMA anomaly detector of one norm series (one layer of one worker).
// Update rule (the reference's, notes item 3), with μ' the updated mean:
//   δ = x − μ;  μ' = μ + α·δ;  σ'² = (1 − α)·(σ² + α·δ·(x − μ')) = (1 − α)·(σ² + α(1 − α)·δ²).
// Finch's EWMA variance (2009, "Incremental calculation of weighted mean and variance", Sec. 9)
// has α·δ² in the bracket: a (1 − α) difference, negligible at α = 0.02.
// Outlier iff x is not finite, or, after warm-up, z > threshold · max(1, std(window)) (one-sided:
// a norm far below the mean is fine).
class EwmaAnomalyDetector {
 public:
  // Arguments as in PenaltyOptions (not re-validated here: PenaltyOptions::validate() does).
  EwmaAnomalyDetector(double alpha, double threshold, std::size_t warmup);

  // Tests x against the current state; if it is not an outlier, records its z (after warm-up) and
  // folds x into the EWMA. Returns true for an outlier (state unchanged).
  bool observe(double x);

  // (x − μ)/σ against the current state; 0 when σ = 0 or before any observation.
  double z_score(double x) const;
  // max(1, sample std of the z-score window); 1 with fewer than 2 entries.
  double threshold_factor() const;
  bool warming_up() const { return accepted_ < warmup_ || accepted_ == 0; }

  double mean() const { return mean_; }
  double variance() const { return variance_; }
  std::uint64_t accepted() const { return accepted_; }  // observations folded into the EWMA
  const std::deque<double>& z_window() const { return z_window_; }  // oldest first
  std::size_t window_capacity() const { return warmup_; }

  // Appends [accepted, mean, variance, window length, window...] to out.
  void save(std::vector<double>& out) const;
  // Reads one record at `pos` (advanced past it). Throws std::invalid_argument naming the problem
  // (truncated, negative count, window longer than the capacity, non-finite values); on throw
  // *this is unchanged.
  void load(std::span<const double> in, std::size_t& pos);

 private:
  double alpha_;
  double threshold_;
  std::size_t warmup_;  // also the z-score window's capacity W
  std::uint64_t accepted_ = 0;
  double mean_ = 0.0;
  double variance_ = 0.0;
  std::deque<double> z_window_;
};

// The decision for one layer at one outer step.
struct PenaltyDecision {
  std::vector<double> weights;       // one per worker, Σ = 1 unless skip (then all 0)
  std::vector<std::size_t> dropped;  // outlier workers (weight 0), increasing
  bool skip = false;                 // every worker is an outlier: no outer step for this layer
};

// The weights of one layer from the workers' norms and outlier flags: softmax(−n_i/T) over the
// workers that are not outliers, 0 for outliers; skip when every worker is one. (LayerPenalty's
// decision once its detectors have spoken; training across sites, where each site's own detector
// flags its own norm.)
PenaltyDecision penalty_weights(std::span<const double> norms, const std::vector<bool>& outlier,
                                double temperature);

// Penalty state for one layer over `workers` workers (every rank keeps the detectors of all the
// workers of its sync group: it sees all their norms).
class LayerPenalty {
 public:
  // Throws std::invalid_argument if options are invalid or workers == 0.
  LayerPenalty(std::size_t workers, const PenaltyOptions& options);

  // norms[i] = ||Δ_i|| of worker i for this layer (>= 0, or NaN/Inf for a broken worker). Updates
  // the detectors (enabled only). Throws std::invalid_argument if norms.size() != workers or a
  // finite norm is negative (a caller bug: norms are square roots).
  PenaltyDecision decide(std::span<const double> norms);

  // Scale for the averaged pseudo-gradient: min(1, clip / (average_norm + 1e-6)); 1 if clip == 0.
  static double clip_scale(double average_norm, double clip);

  std::size_t workers() const { return detectors_.size(); }
  const EwmaAnomalyDetector& detector(std::size_t worker) const { return detectors_.at(worker); }

  void save(std::vector<double>& out) const;
  void load(std::span<const double> in, std::size_t& pos);  // as EwmaAnomalyDetector::load

 private:
  PenaltyOptions options_;
  std::vector<EwmaAnomalyDetector> detectors_;
};

// The penalty of a whole model: one LayerPenalty per layer. Its state goes into checkpoints.
class PseudoGradientPenalty {
 public:
  // Throws std::invalid_argument if options are invalid, layers == 0 or workers == 0.
  PseudoGradientPenalty(std::size_t layers, std::size_t workers, const PenaltyOptions& options);

  // LayerPenalty::decide for layer `layer` (std::out_of_range if layer >= layers()).
  PenaltyDecision decide(std::size_t layer, std::span<const double> norms);

  std::size_t layers() const { return layers_.size(); }
  std::size_t workers() const { return workers_; }
  const PenaltyOptions& options() const { return options_; }
  const LayerPenalty& layer(std::size_t l) const { return layers_.at(l); }

  // Flat state: [format 1, layers, workers, window capacity W, then per layer, per worker one
  // detector record (EwmaAnomalyDetector::save)]. Doubles hold counts exactly (< 2^53), so
  // save → load → continue gives the same decisions bit for bit as never stopping.
  std::vector<double> save() const;
  // Throws std::invalid_argument when the state does not fit this penalty — another format, shape
  // (layers × workers) or window capacity (--ewma-warmup), or a corrupt record — with both shapes
  // in the message; *this is unchanged on throw. Options other than --ewma-warmup are not part of
  // the state (the caller checks that ranks and runs agree on them).
  void load(std::span<const double> state);

 private:
  PenaltyOptions options_;
  std::size_t workers_;
  std::vector<LayerPenalty> layers_;
};

// A-EDiT step weighting (notes "EDiT additions", item 4): w'_i = (1 − r)·w_i + r·s_i / Σ_j s_j with
// s_i = local steps of worker i since the last sync, the sum taken over the workers that were not
// dropped; dropped workers keep weight 0, so the result still sums to 1. If those workers made no
// steps at all (Σ s_j = 0) the weights are returned unchanged; a skipped decision gives all zeros.
// Throws std::invalid_argument unless 0 <= r <= 1 and local_steps has one entry per worker.
std::vector<double> apply_step_weighting(const PenaltyDecision& decision,
                                         std::span<const std::uint64_t> local_steps, double ratio);

}  // namespace atl::localsgd
