// A list of parameter tensors seen as one flat float buffer, in list order: gradients are
// gathered into it for bucketed allreduce or top-k, parameters for local-SGD state. Private to
// src/train.
#pragma once

#include <torch/torch.h>

#include <span>
#include <vector>

namespace atl::train {

class FlatParams {
 public:
  explicit FlatParams(std::vector<torch::Tensor> params);
  std::size_t elements() const { return total_; }
  const std::vector<torch::Tensor>& params() const { return params_; }

  // Gradients into `flat` (elements() floats); a parameter without a gradient on this rank
  // contributes zeros. Returns the list index of the first parameter whose gradient holds a NaN
  // or an infinity (checked in the same pass as the copy), −1 when all are finite.
  int gather_grads(std::span<float> flat) const;
  // Only the gradients of the parameters in [begin, end) of the flat view (whole parameters: a
  // range that cuts one throws std::invalid_argument); the rest of `flat` is left alone. Returns
  // as gather_grads does, over those parameters.
  int gather_grads_range(std::span<float> flat, std::size_t begin, std::size_t end) const;
  // `flat` × scale becomes every parameter's gradient (allocated where missing).
  void scatter_grads(std::span<const float> flat, float scale) const;
  // Parameter values into / from `flat`.
  void gather_values(std::span<float> flat) const;
  void scatter_values(std::span<const float> flat) const;
  // Only the parameters that lie in [begin, end) of `flat` (whole parameters: a range that cuts
  // one throws std::invalid_argument).
  void scatter_range(std::span<const float> flat, std::size_t begin, std::size_t end) const;
  // Elements [begin, begin + part.size()) of the flat view into / from `part` (any range: it may
  // cut parameters; the 2-D mesh's shards are element ranges).
  void gather_part(std::span<float> part, std::size_t begin) const;
  void scatter_part(std::span<const float> part, std::size_t begin) const;

 private:
  std::vector<torch::Tensor> params_;
  std::size_t total_ = 0;
};

}  // namespace atl::train
