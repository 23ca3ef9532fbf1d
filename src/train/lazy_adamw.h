// Row-wise ("lazy") AdamW for the embedding: only rows in the aggregated gradient are updated;
// their moments decay only when they are touched; bias correction uses the global step, and
// decoupled weight decay applies to the touched rows (as TensorFlow's LazyAdam). The arithmetic
// is LibTorch AdamW's, in float: touching every row every step equals torch::optim::AdamW.
// Private to src/train.
#pragma once

#include <torch/torch.h>

#include <string>

#include "embedding_rows.h"

namespace atl::train {

class LazyAdamW {
 public:
  // Moments shaped like `weight` (rows × E), zero.
  explicit LazyAdamW(const torch::Tensor& weight);

  // One update of the rows in `g` at global step t (1-based) with learning rate lr.
  void step(torch::Tensor& weight, const RowGradient& g, double lr, double weight_decay,
            std::int64_t t);

  // Checkpoint state: the two moments under `prefix`_m and `prefix`_v.
  void save(torch::serialize::OutputArchive& archive, const std::string& prefix) const;
  void load(torch::serialize::InputArchive& archive, const std::string& prefix);

  std::size_t state_bytes() const {
    return static_cast<std::size_t>(m_.numel() + v_.numel()) * sizeof(float);
  }

  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

 private:
  torch::Tensor m_, v_;
};

}  // namespace atl::train
