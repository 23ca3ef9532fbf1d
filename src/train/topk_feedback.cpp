#include "topk_feedback.h"

#include <algorithm>
#include <stdexcept>

namespace atl::train {

TopkFeedback::TopkFeedback(std::size_t elements, double share, std::size_t chunk, double decay)
    : share_(share), chunk_(chunk), decay_(decay), residual_(elements, 0.0f) {
  if (!(decay > 0 && decay <= 1 && static_cast<float>(decay) > 0)) {
    throw std::invalid_argument("TopkFeedback: the residual's decay must be in (0, 1]");
  }
}

torch::Tensor TopkFeedback::choose() const {
  const auto n = static_cast<std::int64_t>(residual_.size());
  auto acc = torch::from_blob(const_cast<float*>(residual_.data()), {n}).abs();
  if (chunk_ == 0) {
    const auto k = std::max<std::int64_t>(1, static_cast<std::int64_t>(share_ * n));
    return std::get<0>(std::get<1>(acc.topk(k, 0, true, false)).sort());
  }
  const auto c = static_cast<std::int64_t>(chunk_);
  const auto chunks = (n + c - 1) / c;
  const auto k = std::max<std::int64_t>(1, static_cast<std::int64_t>(share_ * c));
  // The tail chunk is padded with −1, below every |entry|; a padding index chosen (a tail
  // shorter than k) is dropped.
  acc = torch::constant_pad_nd(acc, {0, chunks * c - n}, -1.0).view({chunks, c});
  auto chosen = std::get<1>(acc.topk(k, 1, true, true));
  chosen = (chosen + torch::arange(chunks, torch::kLong).unsqueeze(1) * c).flatten();
  chosen = chosen.masked_select(chosen < n);
  return std::get<0>(chosen.sort());
}

sparse::SparseGradient<std::uint32_t> TopkFeedback::compress(std::span<const float> grad) {
  const std::size_t n = residual_.size();
  if (grad.size() != n) throw std::invalid_argument("TopkFeedback: gradient of the wrong size");
  if (decay_ == 1) {
    for (std::size_t i = 0; i < n; ++i) residual_[i] += grad[i];
  } else {
    const auto b = static_cast<float>(decay_);
    for (std::size_t i = 0; i < n; ++i) residual_[i] = b * residual_[i] + grad[i];
  }
  const auto chosen = choose();
  const auto k = chosen.numel();
  sparse::SparseGradient<std::uint32_t> out;
  out.elements = n;
  out.indices.resize(static_cast<std::size_t>(k));
  out.values.resize(static_cast<std::size_t>(k));
  const auto* c = chosen.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < k; ++i) {
    out.indices[i] = static_cast<std::uint32_t>(c[i]);
    out.values[i] = residual_[c[i]];
    residual_[c[i]] = 0.0f;
  }
  return out;
}

torch::Tensor TopkFeedback::residual() const {
  return torch::from_blob(const_cast<float*>(residual_.data()),
                          {static_cast<std::int64_t>(residual_.size())})
      .clone();
}

void TopkFeedback::set_residual(const torch::Tensor& r) {
  if (r.numel() != static_cast<std::int64_t>(residual_.size())) {
    throw std::runtime_error("checkpoint: top-k residual has the wrong size");
  }
  auto c = r.contiguous();
  std::copy(c.data_ptr<float>(), c.data_ptr<float>() + c.numel(), residual_.begin());
}

}  // namespace atl::train
