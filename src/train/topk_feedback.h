// Top-k compression with error feedback (Stich et al. 2018; as BytePS's compressor decorator):
// acc ← residual + g; send the k = max(1, share·N) entries of largest |acc|; residual ← acc with
// those entries zeroed. The residual is per rank (replicas' residuals differ). Private to
// src/train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::train {

class TopkFeedback {
 public:
  TopkFeedback(std::size_t elements, double share);
  std::size_t elements() const { return residual_.size(); }

  // Adds `grad` to the residual and moves the k largest entries out into a sparse gradient
  // (sorted indices over M = elements()).
  sparse::SparseGradient<std::uint32_t> compress(std::span<const float> grad);

  // Checkpoint state: the residual (elements() floats).
  torch::Tensor residual() const;
  void set_residual(const torch::Tensor& residual);

 private:
  double share_;
  std::vector<float> residual_;
};

}  // namespace atl::train
