#include "flat_params.h"

#include <algorithm>
#include <stdexcept>

namespace atl::train {
namespace {
void check_size(std::size_t got, std::size_t want) {
  if (got != want) throw std::invalid_argument("FlatParams: flat buffer of the wrong size");
}
}  // namespace

FlatParams::FlatParams(std::vector<torch::Tensor> params) : params_(std::move(params)) {
  for (const auto& p : params_) total_ += static_cast<std::size_t>(p.numel());
}

void FlatParams::gather_grads(std::span<float> flat) const {
  check_size(flat.size(), total_);
  std::size_t off = 0;
  for (const auto& p : params_) {
    const auto n = static_cast<std::size_t>(p.numel());
    if (p.grad().defined()) {
      auto g = p.grad().contiguous();
      std::copy(g.data_ptr<float>(), g.data_ptr<float>() + n, flat.data() + off);
    } else {
      std::fill(flat.data() + off, flat.data() + off + n, 0.0f);  // unused on this rank
    }
    off += n;
  }
}

void FlatParams::scatter_grads(std::span<const float> flat, float scale) const {
  check_size(flat.size(), total_);
  std::size_t off = 0;
  for (auto p : params_) {
    auto src = torch::from_blob(const_cast<float*>(flat.data()) + off, p.sizes(), torch::kFloat);
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    p.mutable_grad().copy_(src).mul_(scale);
    off += static_cast<std::size_t>(p.numel());
  }
}

void FlatParams::gather_values(std::span<float> flat) const {
  check_size(flat.size(), total_);
  std::size_t off = 0;
  for (const auto& p : params_) {
    auto v = p.detach().contiguous();
    const auto n = static_cast<std::size_t>(p.numel());
    std::copy(v.data_ptr<float>(), v.data_ptr<float>() + n, flat.data() + off);
    off += n;
  }
}

void FlatParams::scatter_values(std::span<const float> flat) const {
  check_size(flat.size(), total_);
  torch::NoGradGuard no_grad;
  std::size_t off = 0;
  for (auto p : params_) {
    auto src = torch::from_blob(const_cast<float*>(flat.data()) + off, p.sizes(), torch::kFloat);
    p.detach().copy_(src);
    off += static_cast<std::size_t>(p.numel());
  }
}

void FlatParams::scatter_range(std::span<const float> flat, std::size_t begin,
                               std::size_t end) const {
  check_size(flat.size(), total_);
  torch::NoGradGuard no_grad;
  std::size_t off = 0;
  for (auto p : params_) {
    const auto n = static_cast<std::size_t>(p.numel());
    const bool inside = off >= begin && off + n <= end;
    if (!inside && off < end && off + n > begin) {
      throw std::invalid_argument("FlatParams: range cuts a parameter");
    }
    if (inside) {
      p.detach().copy_(
          torch::from_blob(const_cast<float*>(flat.data()) + off, p.sizes(), torch::kFloat));
    }
    off += n;
  }
}

}  // namespace atl::train
