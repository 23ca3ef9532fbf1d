// Top-k compression with error feedback (Stich et al. 2018; as BytePS's compressor decorator):
// acc ← residual + g; send the k = max(1, share·N) entries of largest |acc|; residual ← acc with
// those entries zeroed. The residual is per rank (replicas' residuals differ). With a chunk size
// C > 0 the selection is per chunk of C consecutive entries, max(1, share·C) in each (as
// SparseLoCo and DeMo choose per chunk): every part of the vector is sent at the same rate, so no
// layer's residual waits for rounds and then goes out in a burst. With a decay β < 1 the residual
// is decayed before each add, acc ← β·residual + g (SparseLoCo, Sarfi et al. 2025: the decayed
// accumulator takes the place of DiLoCo's outer momentum), once per compress() call: across sites,
// once per meeting the site sends at (not at one it sits out with a non-finite Δ). Private to
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
  TopkFeedback(std::size_t elements, double share, std::size_t chunk = 0, double decay = 1);
  std::size_t elements() const { return residual_.size(); }

  // Adds `grad` to the (decayed) residual and moves the k largest entries out into a sparse
  // gradient (sorted indices over M = elements()).
  sparse::SparseGradient<std::uint32_t> compress(std::span<const float> grad);

  // Checkpoint state: the residual (elements() floats).
  torch::Tensor residual() const;
  void set_residual(const torch::Tensor& residual);

 private:
  // The indices chosen from the residual (sorted): the largest over all, or per chunk.
  torch::Tensor choose() const;

  double share_;
  std::size_t chunk_;
  double decay_;
  std::vector<float> residual_;
};

}  // namespace atl::train
