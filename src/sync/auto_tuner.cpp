#include "auto_tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace atl::sync {

bool SchemeTuner::stale(double max_nnz, double min_nnz) const {
  if (candidates_.empty() || calls_ >= kRefresh) return true;
  // +1: an empty gradient on some rank is a count like any other, not a division by zero.
  return max_nnz + 1 > kDrift * (max_nnz_ + 1) || (min_nnz + 1) * kDrift < min_nnz_ + 1;
}

void SchemeTuner::reset(double max_nnz, double min_nnz, std::vector<cost::Estimate> ranked,
                        std::string model_summary) {
  if (ranked.empty()) throw std::invalid_argument("auto: the cost model ranked no scheme");
  ranked_ = std::move(ranked);
  candidates_ = {Candidate{ranked_.front()}};
  widened_ = false;
  model_summary_ = std::move(model_summary);
  max_nnz_ = max_nnz;
  min_nnz_ = min_nnz;
  calls_ = 0;
  last_ = -1;
}

void SchemeTuner::widen() {
  widened_ = true;
  // Copied, not referenced: push_back below may move candidates_ to new storage.
  const double favourite_s = candidates_.front().best_s;
  const double missed = std::max(0.0, favourite_s - candidates_.front().estimate.time_s);
  for (std::size_t k = 1; k < ranked_.size() && candidates_.size() < kMaxCandidates; ++k) {
    if (ranked_[k].time_s + missed <= kSpread * favourite_s) candidates_.push_back({ranked_[k]});
  }
}

std::vector<SchemeTuner::Candidate>::const_iterator SchemeTuner::fastest() const {
  return std::min_element(
      candidates_.begin(), candidates_.end(),
      [](const Candidate& a, const Candidate& b) { return a.best_s < b.best_s; });
}

void SchemeTuner::record(double time_s) {
  if (last_ < 0) return;
  auto& c = candidates_[static_cast<std::size_t>(last_)];
  if (c.trials < kTrials) {
    c.best_s = c.trials == 0 ? time_s : std::min(c.best_s, time_s);
    ++c.trials;
  }
  last_ = -1;
}

SchemeTuner::Pick SchemeTuner::next() {
  if (candidates_.empty()) throw std::logic_error("auto: next() before reset()");
  ++calls_;
  auto untried = [&] {
    return std::find_if(candidates_.cbegin(), candidates_.cend(),
                        [](const Candidate& c) { return c.trials < kTrials; });
  };
  auto it = untried();
  if (it == candidates_.end() && !widened_) {
    widen();
    it = untried();
  }
  const bool exploring = it != candidates_.cend();
  if (!exploring) it = fastest();
  last_ = static_cast<int>(it - candidates_.cbegin());
  return {it->estimate.scheme, exploring, it->estimate.time_s, it->best_s};
}

std::optional<std::string> SchemeTuner::settled() const {
  if (candidates_.empty() || !widened_) return std::nullopt;
  for (const auto& c : candidates_)
    if (c.trials < kTrials) return std::nullopt;
  return fastest()->estimate.scheme;
}

std::string SchemeTuner::reason(const Pick& pick) const {
  std::string s = pick.exploring ? "trial of " + pick.scheme : "fastest measured: " + pick.scheme;
  s += "; candidates (model ms / measured ms):";
  for (const auto& c : candidates_) {
    s += fmt::format(" {} {:.3f} / ", c.estimate.scheme, c.estimate.time_s * 1e3);
    s += c.trials ? fmt::format("{:.3f}", c.best_s * 1e3) : std::string("-");
  }
  return s + "; " + model_summary_;
}

}  // namespace atl::sync
