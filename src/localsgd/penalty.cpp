#include "atoll/localsgd/penalty.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace atl::localsgd {

namespace {

constexpr double kStateFormat = 1.0;
constexpr std::size_t kStateHeader = 4;  // format, layers, workers, window capacity

// Largest integer a double holds exactly; counts in a saved state must not exceed it.
constexpr double kMaxExactCount = 9007199254740992.0;  // 2^53

bool is_count(double v) { return v >= 0 && v <= kMaxExactCount && v == std::floor(v); }

double read(std::span<const double> in, std::size_t& pos, const char* what) {
  if (pos >= in.size()) {
    throw std::invalid_argument(fmt::format(
        "penalty state is truncated: {} missing at position {} of {}", what, pos, in.size()));
  }
  return in[pos++];
}

}  // namespace

std::optional<std::string> PenaltyOptions::check() const {
  if (!(anomaly_threshold > 0) || !std::isfinite(anomaly_threshold)) {
    return fmt::format("--anomaly-threshold must be a finite number > 0 (got {})",
                       anomaly_threshold);
  }
  if (!(ewma_alpha > 0 && ewma_alpha < 1)) {
    return fmt::format("--ewma-alpha must lie in (0, 1) (got {})", ewma_alpha);
  }
  if (ewma_warmup < 0) {
    return fmt::format("--ewma-warmup must be >= 0 (got {})", ewma_warmup);
  }
  if (!(weight_temperature > 0) || !std::isfinite(weight_temperature)) {
    return fmt::format("--weight-temperature must be a finite number > 0 (got {})",
                       weight_temperature);
  }
  if (!(clip >= 0) || !std::isfinite(clip)) {
    return fmt::format("--clip must be a finite number >= 0, 0 = off (got {})", clip);
  }
  return std::nullopt;
}

void PenaltyOptions::validate() const {
  if (auto problem = check()) throw std::invalid_argument(*problem);
}

// ---- EwmaAnomalyDetector ----

EwmaAnomalyDetector::EwmaAnomalyDetector(double alpha, double threshold, std::size_t warmup)
    : alpha_(alpha), threshold_(threshold), warmup_(warmup) {}

double EwmaAnomalyDetector::z_score(double x) const {
  if (accepted_ == 0 || variance_ <= 0) return 0.0;
  return (x - mean_) / std::sqrt(variance_);
}

double EwmaAnomalyDetector::threshold_factor() const {
  const std::size_t n = z_window_.size();
  if (n < 2) return 1.0;
  double sum = 0;
  for (double z : z_window_) sum += z;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (double z : z_window_) squares += (z - mean) * (z - mean);
  return std::max(1.0, std::sqrt(squares / static_cast<double>(n - 1)));
}

bool EwmaAnomalyDetector::observe(double x) {
  if (!std::isfinite(x)) return true;
  if (!warming_up()) {
    const double z = z_score(x);
    if (z > threshold_ * threshold_factor()) return true;
    if (warmup_ > 0) {
      if (z_window_.size() == warmup_) z_window_.pop_front();
      z_window_.push_back(z);
    }
  }
  if (accepted_ == 0) {
    mean_ = x;
    variance_ = 0.0;
  } else {
    const double delta = x - mean_;
    mean_ += alpha_ * delta;
    variance_ = (1 - alpha_) * (variance_ + alpha_ * delta * (x - mean_));
  }
  ++accepted_;
  return false;
}

void EwmaAnomalyDetector::save(std::vector<double>& out) const {
  out.push_back(static_cast<double>(accepted_));
  out.push_back(mean_);
  out.push_back(variance_);
  out.push_back(static_cast<double>(z_window_.size()));
  out.insert(out.end(), z_window_.begin(), z_window_.end());
}

void EwmaAnomalyDetector::load(std::span<const double> in, std::size_t& pos) {
  const std::size_t start = pos;
  std::size_t at = pos;
  const double accepted = read(in, at, "the accepted count");
  const double mean = read(in, at, "the EWMA mean");
  const double variance = read(in, at, "the EWMA variance");
  const double window = read(in, at, "the z-score window length");
  if (!is_count(accepted)) {
    throw std::invalid_argument(
        fmt::format("penalty state is corrupt: accepted count {} at position {}", accepted, start));
  }
  if (!std::isfinite(mean) || !std::isfinite(variance) || variance < 0) {
    throw std::invalid_argument(
        fmt::format("penalty state is corrupt: EWMA mean {} and variance {} at position {}", mean,
                    variance, start + 1));
  }
  if (!is_count(window) || window > static_cast<double>(warmup_)) {
    throw std::invalid_argument(fmt::format(
        "penalty state is corrupt: z-score window of {} entries at position {} (capacity {})",
        window, start + 3, warmup_));
  }
  std::deque<double> z_window;
  for (std::size_t k = 0; k < static_cast<std::size_t>(window); ++k) {
    const double z = read(in, at, "a z-score");
    if (!std::isfinite(z)) {
      throw std::invalid_argument(
          fmt::format("penalty state is corrupt: z-score {} at position {}", z, at - 1));
    }
    z_window.push_back(z);
  }
  accepted_ = static_cast<std::uint64_t>(accepted);
  mean_ = mean;
  variance_ = variance;
  z_window_ = std::move(z_window);
  pos = at;
}

// ---- LayerPenalty ----

LayerPenalty::LayerPenalty(std::size_t workers, const PenaltyOptions& options) : options_(options) {
  options_.validate();
  if (workers == 0) throw std::invalid_argument("pseudo-gradient penalty needs >= 1 worker");
  detectors_.assign(workers, EwmaAnomalyDetector(options.ewma_alpha, options.anomaly_threshold,
                                                 static_cast<std::size_t>(options.ewma_warmup)));
}

PenaltyDecision LayerPenalty::decide(std::span<const double> norms) {
  const std::size_t n = detectors_.size();
  if (norms.size() != n) {
    throw std::invalid_argument(
        fmt::format("pseudo-gradient penalty: {} norms for {} workers", norms.size(), n));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (norms[i] < 0) {
      throw std::invalid_argument(
          fmt::format("pseudo-gradient penalty: worker {} has a negative norm {}", i, norms[i]));
    }
  }
  PenaltyDecision decision;
  if (!options_.enabled) {
    decision.weights.assign(n, 1.0 / static_cast<double>(n));
    return decision;
  }
  std::vector<bool> outlier(n);
  for (std::size_t i = 0; i < n; ++i) outlier[i] = detectors_[i].observe(norms[i]);
  return penalty_weights(norms, outlier, options_.weight_temperature);
}

PenaltyDecision penalty_weights(std::span<const double> norms, const std::vector<bool>& outlier,
                                double temperature) {
  const std::size_t n = norms.size();
  PenaltyDecision decision;
  double smallest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < n; ++i) {
    if (!outlier[i]) {
      smallest = std::min(smallest, norms[i]);
    } else {
      decision.dropped.push_back(i);
    }
  }
  decision.weights.assign(n, 0.0);
  if (decision.dropped.size() == n) {
    decision.skip = true;
    return decision;
  }
  // softmax(−n_i/T), shifted by the largest exponent −min(n)/T so every term is in (0, 1].
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (outlier[i]) continue;
    decision.weights[i] = std::exp((smallest - norms[i]) / temperature);
    sum += decision.weights[i];
  }
  for (double& w : decision.weights) w /= sum;
  return decision;
}

double LayerPenalty::clip_scale(double average_norm, double clip) {
  if (clip == 0) return 1.0;
  return std::min(1.0, clip / (average_norm + 1e-6));
}

void LayerPenalty::save(std::vector<double>& out) const {
  for (const auto& d : detectors_) d.save(out);
}

void LayerPenalty::load(std::span<const double> in, std::size_t& pos) {
  std::vector<EwmaAnomalyDetector> loaded = detectors_;
  std::size_t at = pos;
  for (auto& d : loaded) d.load(in, at);
  detectors_ = std::move(loaded);
  pos = at;
}

// ---- PseudoGradientPenalty ----

PseudoGradientPenalty::PseudoGradientPenalty(std::size_t layers, std::size_t workers,
                                             const PenaltyOptions& options)
    : options_(options), workers_(workers) {
  options_.validate();
  if (layers == 0) throw std::invalid_argument("pseudo-gradient penalty needs >= 1 layer");
  layers_.assign(layers, LayerPenalty(workers, options));
}

PenaltyDecision PseudoGradientPenalty::decide(std::size_t layer, std::span<const double> norms) {
  if (layer >= layers_.size()) {
    throw std::out_of_range(
        fmt::format("pseudo-gradient penalty: layer {} of {}", layer, layers_.size()));
  }
  return layers_[layer].decide(norms);
}

std::vector<double> PseudoGradientPenalty::save() const {
  std::vector<double> out = {kStateFormat, static_cast<double>(layers_.size()),
                             static_cast<double>(workers_),
                             static_cast<double>(options_.ewma_warmup)};
  for (const auto& l : layers_) l.save(out);
  return out;
}

void PseudoGradientPenalty::load(std::span<const double> state) {
  if (state.size() < kStateHeader || state[0] != kStateFormat) {
    throw std::invalid_argument(fmt::format(
        "penalty state has an unknown format ({} values, format tag {}; expected tag {})",
        state.size(), state.empty() ? std::nan("") : state[0], kStateFormat));
  }
  const double layers = static_cast<double>(layers_.size());
  const double workers = static_cast<double>(workers_);
  const double window = static_cast<double>(options_.ewma_warmup);
  if (state[1] != layers || state[2] != workers || state[3] != window) {
    throw std::invalid_argument(fmt::format(
        "penalty state was saved for {} layers × {} workers with a z-score window of {} "
        "(--ewma-warmup); this run has {} layers × {} workers and a window of {}",
        state[1], state[2], state[3], layers, workers, window));
  }
  std::vector<LayerPenalty> loaded = layers_;
  std::size_t pos = kStateHeader;
  for (auto& l : loaded) l.load(state, pos);
  if (pos != state.size()) {
    throw std::invalid_argument(
        fmt::format("penalty state is corrupt: {} values left over after {} layers × {} workers",
                    state.size() - pos, layers_.size(), workers_));
  }
  layers_ = std::move(loaded);
}

std::vector<double> apply_step_weighting(const PenaltyDecision& decision,
                                         std::span<const std::uint64_t> local_steps, double ratio) {
  const std::size_t n = decision.weights.size();
  if (!(ratio >= 0 && ratio <= 1)) {
    throw std::invalid_argument(
        fmt::format("step weighting ratio must lie in [0, 1] (got {})", ratio));
  }
  if (local_steps.size() != n) {
    throw std::invalid_argument(
        fmt::format("step weighting: {} step counts for {} workers", local_steps.size(), n));
  }
  std::vector<double> weights = decision.weights;
  if (decision.skip) return weights;
  std::vector<bool> dropped(n, false);
  for (std::size_t i : decision.dropped) dropped.at(i) = true;
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!dropped[i]) total += static_cast<double>(local_steps[i]);
  }
  if (total == 0) return weights;
  for (std::size_t i = 0; i < n; ++i) {
    if (dropped[i]) continue;
    weights[i] = (1 - ratio) * weights[i] + ratio * static_cast<double>(local_steps[i]) / total;
  }
  return weights;
}

}  // namespace atl::localsgd
