// `auto`'s choice across calls: the cost model proposes, measured calls decide.
// The alpha-beta model (cost_model.h) estimates network time only, and CPU work is most of a call
// at these sizes (docs/results/sync.md: a 0.1% call on 100 Gbit/s takes ~3 ms, its network
// estimate ~0.4), so the model alone picked SparCML at 0.1%, 30% slower than Zen. The tuner first
// runs the model's favourite on kTrials real calls (the first pays its buffers' allocation, the
// second was still slow for Zen at 0.1%; the fastest counts). What the model missed there (measured
// minus estimated) is then added to every other scheme's estimate, optimistically: each is a
// candidate when that sum is within kSpread of the favourite's measured time (at most
// kMaxCandidates in all, in the model's order). Each candidate runs kTrials calls, then the fastest
// measured runs, as cuDNN's benchmark mode and NCCL's tuner plugins do. A new sparsity profile
// (non-zero counts drifted by more than kDrift, or kRefresh calls since the last one) starts over.
// Every input is the same on every rank (collective results), so every rank picks the same scheme.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "atoll/cost/cost_model.h"

namespace atl::sync {

class SchemeTuner {
 public:
  static constexpr double kSpread = 2.0;
  static constexpr std::size_t kMaxCandidates = 5;
  static constexpr int kTrials = 3;
  static constexpr double kDrift = 1.25;
  static constexpr long kRefresh = 1000;

  struct Pick {
    std::string scheme;
    bool exploring = false;  // a trial call: the candidate's time is not known yet
    double predicted_s = 0;  // the model's network-only estimate for it
    double measured_s = 0;   // its fastest trial so far (0 before its first)
  };

  // Whether the profile must be measured (again) before this call, given the largest and smallest
  // local non-zero count over the ranks.
  bool stale(double max_nnz, double min_nnz) const;
  // A new profile's estimates (fastest first, as cost::rank_schemes returns them).
  void reset(double max_nnz, double min_nnz, std::vector<cost::Estimate> ranked,
             std::string model_summary);
  // Whether the previous call was a pick whose time record() should receive.
  bool awaiting() const { return last_ >= 0; }
  // The previous call's time, max over ranks.
  void record(double time_s);
  // The scheme for this call; the call's time goes to record() at the next one.
  Pick next();
  // The scheme next() will return unless the profile is stale: once every candidate has had its
  // trials, the fastest measured (record() no longer changes it); none while still exploring.
  std::optional<std::string> settled() const;
  // The candidates with their estimates and measured times, then the model's summary.
  std::string reason(const Pick& pick) const;

 private:
  struct Candidate {
    cost::Estimate estimate;
    int trials = 0;
    double best_s = 0;
  };
  // After the favourite's trials: the others within reach, by its measured error.
  void widen();
  // The candidate with the fastest measured time.
  std::vector<Candidate>::const_iterator fastest() const;

  std::vector<cost::Estimate> ranked_;  // the model's estimates, fastest first
  std::vector<Candidate> candidates_;
  bool widened_ = false;
  std::string model_summary_;
  double max_nnz_ = 0, min_nnz_ = 0;
  long calls_ = 0;
  int last_ = -1;
};

}  // namespace atl::sync
