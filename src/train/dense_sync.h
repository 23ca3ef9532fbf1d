// Dense gradients of all parameters but the embedding: flattened into one buffer (FlatParams),
// summed by bucketed allreduce, or top-k compressed with error feedback (TopkFeedback) and summed
// by a sparse scheme; then averaged and written back as the parameters' gradients. Private to
// src/train.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "flat_params.h"
#include "topk_feedback.h"

namespace atl::train {

class DenseSync {
 public:
  // topk_share 0: dense bucketed allreduce; > 0: top-k + error feedback through `scheme`.
  DenseSync(std::vector<torch::Tensor> params, std::uint64_t bucket_bytes, double topk_share);
  std::size_t elements() const { return flat_params_.elements(); }
  TopkFeedback* topk() { return topk_ ? &*topk_ : nullptr; }

  // Collective: every parameter's gradient becomes the mean over the ranks of `comm`.
  void run(comm::Communicator& comm, sync::SyncScheme& scheme);

 private:
  FlatParams flat_params_;
  std::size_t bucket_elements_;
  std::optional<TopkFeedback> topk_;
  std::vector<float> flat_;
  sync::SyncResult<std::uint32_t> result_;
};

}  // namespace atl::train
