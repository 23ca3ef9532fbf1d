#include "flat_params.h"

#include <algorithm>
#include <stdexcept>

#include "finite_values.h"

namespace atl::train {
namespace {
void check_size(std::size_t got, std::size_t want) {
  if (got != want) throw std::invalid_argument("FlatParams: flat buffer of the wrong size");
}

// dst[i] = src[i] * scale for n values, in blocks of a fixed 64 with restrict pointers so that GCC
// vectorises it at -O2 (finite_values.cpp says why).
void copy_scaled(const float* __restrict src, float* __restrict dst, std::size_t n, float scale) {
  constexpr std::size_t kBlock = 64;
  const std::size_t whole = n - n % kBlock;
  for (std::size_t b = 0; b < whole; b += kBlock)
    for (std::size_t i = b; i < b + kBlock; ++i) dst[i] = src[i] * scale;
  for (std::size_t i = whole; i < n; ++i) dst[i] = src[i] * scale;
}

// Calls f(parameter, its offset in the flat view, its elements, its list index) for each
// parameter that lies wholly in [begin, end); a parameter the range cuts throws
// std::invalid_argument.
template <class F>
void for_whole(const std::vector<torch::Tensor>& params, std::size_t begin, std::size_t end,
               F&& f) {
  std::size_t off = 0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto& p = params[k];
    const auto n = static_cast<std::size_t>(p.numel());
    const bool inside = off >= begin && off + n <= end;
    if (!inside && off < end && off + n > begin) {
      throw std::invalid_argument("FlatParams: range cuts a parameter");
    }
    if (inside) f(p, off, n, static_cast<int>(k));
    off += n;
  }
}
}  // namespace

FlatParams::FlatParams(std::vector<torch::Tensor> params) : params_(std::move(params)) {
  for (const auto& p : params_) total_ += static_cast<std::size_t>(p.numel());
}

int FlatParams::gather_grads(std::span<float> flat) const {
  return gather_grads_range(flat, 0, total_);
}

int FlatParams::gather_grads_range(std::span<float> flat, std::size_t begin,
                                   std::size_t end) const {
  check_size(flat.size(), total_);
  int first_bad = -1;
  for_whole(params_, begin, end,
            [&](const torch::Tensor& p, std::size_t off, std::size_t n, int k) {
              if (p.grad().defined()) {
                auto g = p.grad().contiguous();
                const bool finite = copy_all_finite({g.data_ptr<float>(), n}, flat.data() + off);
                if (!finite && first_bad < 0) first_bad = k;
              } else {
                std::fill(flat.data() + off, flat.data() + off + n, 0.0f);  // unused on this rank
              }
            });
  return first_bad;
}

void FlatParams::scatter_grads(std::span<const float> flat, float scale) const {
  check_size(flat.size(), total_);
  std::size_t off = 0;
  for (auto p : params_) {
    const auto n = static_cast<std::size_t>(p.numel());
    if (!p.grad().defined()) p.mutable_grad() = torch::empty_like(p);
    auto& grad = p.mutable_grad();
    if (grad.is_contiguous() && grad.scalar_type() == torch::kFloat) {
      copy_scaled(flat.data() + off, grad.data_ptr<float>(), n, scale);  // one pass
    } else {
      grad.copy_(torch::from_blob(const_cast<float*>(flat.data()) + off, p.sizes(), torch::kFloat))
          .mul_(scale);
    }
    off += n;
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
  for_whole(params_, begin, end, [&](const torch::Tensor& p, std::size_t off, std::size_t, int) {
    p.detach().copy_(
        torch::from_blob(const_cast<float*>(flat.data()) + off, p.sizes(), torch::kFloat));
  });
}

namespace {
// Calls f(parameter values, offset in the parameter, offset in the part, count) for each
// parameter that overlaps [begin, begin + size) of the flat view.
template <class F>
void for_part(const std::vector<torch::Tensor>& params, std::size_t total, std::size_t begin,
              std::size_t size, F&& f) {
  if (begin > total || size > total - begin) {
    throw std::invalid_argument("FlatParams: part beyond the flat buffer");
  }
  std::size_t off = 0;
  const std::size_t end = begin + size;
  for (const auto& p : params) {
    const auto n = static_cast<std::size_t>(p.numel());
    const std::size_t lo = std::max(off, begin), hi = std::min(off + n, end);
    if (lo < hi) f(p, lo - off, lo - begin, hi - lo);
    off += n;
    if (off >= end) break;
  }
}
}  // namespace

void FlatParams::gather_part(std::span<float> part, std::size_t begin) const {
  for_part(params_, total_, begin, part.size(),
           [&](const torch::Tensor& p, std::size_t at, std::size_t to, std::size_t n) {
             auto v = p.detach().contiguous();
             std::copy_n(v.data_ptr<float>() + at, n, part.data() + to);
           });
}

void FlatParams::scatter_part(std::span<const float> part, std::size_t begin) const {
  torch::NoGradGuard no_grad;
  for_part(params_, total_, begin, part.size(),
           [&](const torch::Tensor& p, std::size_t at, std::size_t from, std::size_t n) {
             if (!p.is_contiguous()) throw std::logic_error("FlatParams: parameter not contiguous");
             std::copy_n(part.data() + from, n, p.detach().data_ptr<float>() + at);
           });
}

}  // namespace atl::train
