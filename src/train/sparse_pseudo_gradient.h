// Sparse pseudo-gradients over the WAN (--pseudo-topk f, docs/wan-train.md): at a meeting each
// site sends the top f of its pseudo-gradient Δ_i = θ̄ − θ_i in every chunk of kChunk parameters
// (with error feedback: what it did not send is added to its next Δ) and the clique sums them with
// a sparse scheme (--sync, Zen by default), exactly. The sum is a mean pseudo-gradient only against
// a common anchor, so every round must be one clique of all sites (checked by SiteTraining). A site
// whose Δ holds a NaN or an infinity sends nothing and the others share its weight. Private to
// src/train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/localsgd/clique_sync.h"
#include "atoll/sync/scheme.h"
#include "topk_feedback.h"

namespace atl::train {

class SparsePseudoGradient {
 public:
  static constexpr std::size_t kChunk = 4096;  // the top f is taken per chunk (topk_feedback.h)

  // `elements`: the parameters' count (< 2^32); `share`: f in (0, 1]; `scheme`: a sparse scheme's
  // name (sync/scheme.h); `decay`: the residual's decay per meeting (topk_feedback.h).
  SparsePseudoGradient(std::size_t elements, double share, const std::string& scheme,
                       double decay = 1);

  // One meeting (collective over `clique`): mean_delta := the mean over the finite members of
  // their compressed Δ. Returns the members dropped (skipped: none finite, mean_delta is zero).
  localsgd::CliqueMeeting exchange(comm::Communicator& clique, std::span<const float> anchor,
                                   std::span<const float> theta, std::vector<float>& mean_delta);
  // Bytes this rank sent in the last exchange, and non-zeros it sent.
  std::uint64_t last_bytes_sent() const { return last_bytes_; }
  std::size_t last_nnz() const { return last_nnz_; }

  // Checkpoint state: the error-feedback residual.
  torch::Tensor residual() const { return topk_.residual(); }
  void set_residual(const torch::Tensor& r) { topk_.set_residual(r); }
  std::uint64_t state_bytes() const { return topk_.elements() * sizeof(float); }

 private:
  TopkFeedback topk_;
  std::unique_ptr<sync::SyncScheme> scheme_;
  sync::SyncResult<std::uint32_t> sum_;
  std::vector<float> delta_;
  std::uint64_t last_bytes_ = 0;
  std::size_t last_nnz_ = 0;
};

}  // namespace atl::train
