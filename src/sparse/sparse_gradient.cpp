#include "atoll/sparse/sparse_gradient.h"

#include <fmt/format.h>

#include <algorithm>

namespace atl::sparse {

namespace {
// Whether x[0..n) is strictly increasing and below `bound`: blocks of 64 neighbours compared with
// no branch inside (so the compiler vectorises them), then the last index against the bound.
// check() names the first problem only where this fails.
template <class Index>
bool increasing_below(const Index* __restrict x, std::size_t n, std::uint64_t bound) {
  if (n == 0) return true;
  std::size_t i = 1;
  for (; i + 64 <= n; i += 64) {
    unsigned bad = 0;
    for (std::size_t k = 0; k < 64; ++k) bad |= static_cast<unsigned>(x[i + k] <= x[i + k - 1]);
    if (bad) return false;
  }
  for (; i < n; ++i)
    if (x[i] <= x[i - 1]) return false;
  return static_cast<std::uint64_t>(x[n - 1]) < bound;
}
}  // namespace

template <class Index>
std::optional<std::string> SparseGradient<Index>::check() const {
  if (width == 0) return std::string("sparse gradient has block width 0 (must be at least 1)");
  if (width == 1 && indices.size() != values.size()) {
    return fmt::format("sparse gradient has {} indices but {} values", indices.size(),
                       values.size());
  }
  if (width > 1 && values.size() != indices.size() * width) {
    return fmt::format("sparse gradient of blocks of {} has {} indices but {} values (must be {})",
                       width, indices.size(), values.size(), indices.size() * width);
  }
  if (elements > max_elements<Index>()) {
    return fmt::format("element count {} does not fit {}-bit indices", elements, 8 * sizeof(Index));
  }
  if (elements % width != 0) {
    return fmt::format("element count M = {} is not a multiple of the block width {}", elements,
                       width);
  }
  const std::uint64_t bound = elements / width;
  if (increasing_below(indices.data(), indices.size(), bound)) return std::nullopt;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= bound) {
      if (width == 1) {
        return fmt::format("index {} at position {} is out of range: must be < M = {}",
                           static_cast<std::uint64_t>(indices[i]), i, elements);
      }
      return fmt::format("block {} at position {} is out of range: must be < M / {} = {}",
                         static_cast<std::uint64_t>(indices[i]), i, width, bound);
    }
    if (i > 0 && indices[i] <= indices[i - 1]) {
      return fmt::format("indices must be sorted and unique: index {} at position {} follows {}",
                         static_cast<std::uint64_t>(indices[i]), i,
                         static_cast<std::uint64_t>(indices[i - 1]));
    }
  }
  return std::nullopt;
}

template <class Index>
void SparseGradient<Index>::validate() const {
  if (auto problem = check()) throw InvalidGradient(*problem);
}

template <class Index>
std::vector<float> SparseGradient<Index>::to_dense() const {
  std::vector<float> dense(elements, 0.0f);
  const std::size_t w = width;
  for (std::size_t i = 0; i < indices.size(); ++i)
    std::copy_n(values.data() + i * w, w, dense.data() + static_cast<std::size_t>(indices[i]) * w);
  return dense;
}

template <class Index>
void expand_blocks(const SparseGradient<Index>& grad, SparseGradient<Index>& out) {
  const std::size_t w = grad.width;
  out.elements = grad.elements;
  out.width = 1;
  out.values = grad.values;
  out.indices.resize(grad.indices.size() * w);
  Index* dst = out.indices.data();
  for (const Index block : grad.indices) {
    const Index base = static_cast<Index>(block * w);
    for (std::size_t j = 0; j < w; ++j) *dst++ = static_cast<Index>(base + j);
  }
}

template <class Index>
SparseGradient<Index> group_blocks(const SparseGradient<Index>& grad, std::uint32_t width) {
  if (width == 0 || grad.width != 1 || grad.elements % width != 0) {
    throw InvalidGradient(fmt::format(
        "cannot group a gradient of M = {} (block width {}) into blocks of {}: M must be a "
        "multiple of a positive width, and the gradient in element form",
        grad.elements, grad.width, width));
  }
  SparseGradient<Index> out;
  out.elements = grad.elements;
  out.width = width;
  for (std::size_t i = 0; i < grad.indices.size(); ++i) {
    const auto block = static_cast<Index>(grad.indices[i] / width);
    if (out.indices.empty() || out.indices.back() != block) {
      out.indices.push_back(block);
      out.values.resize(out.values.size() + width, 0.0f);
    }
    out.values[out.values.size() - width + grad.indices[i] % width] = grad.values[i];
  }
  return out;
}

template <class Index>
SparseGradient<Index> SparseGradient<Index>::from_dense(std::span<const float> dense) {
  SparseGradient g;
  g.elements = dense.size();
  for (std::size_t i = 0; i < dense.size(); ++i) {
    if (dense[i] != 0.0f) {
      g.indices.push_back(static_cast<Index>(i));
      g.values.push_back(dense[i]);
    }
  }
  return g;
}

template <class Index>
void merge_add(std::span<const Index> a_idx, std::span<const float> a_val,
               std::span<const Index> b_idx, std::span<const float> b_val,
               std::vector<Index>& out_idx, std::vector<float>& out_val) {
  out_idx.clear();
  out_val.clear();
  out_idx.reserve(a_idx.size() + b_idx.size());
  out_val.reserve(a_idx.size() + b_idx.size());
  std::size_t i = 0, j = 0;
  while (i < a_idx.size() && j < b_idx.size()) {
    if (a_idx[i] < b_idx[j]) {
      out_idx.push_back(a_idx[i]);
      out_val.push_back(a_val[i++]);
    } else if (b_idx[j] < a_idx[i]) {
      out_idx.push_back(b_idx[j]);
      out_val.push_back(b_val[j++]);
    } else {
      out_idx.push_back(a_idx[i]);
      out_val.push_back(a_val[i++] + b_val[j++]);
    }
  }
  out_idx.insert(out_idx.end(), a_idx.begin() + i, a_idx.end());
  out_val.insert(out_val.end(), a_val.begin() + i, a_val.end());
  out_idx.insert(out_idx.end(), b_idx.begin() + j, b_idx.end());
  out_val.insert(out_val.end(), b_val.begin() + j, b_val.end());
}

template struct SparseGradient<std::uint32_t>;
template struct SparseGradient<std::uint64_t>;
template void expand_blocks(const SparseGradient<std::uint32_t>&, SparseGradient<std::uint32_t>&);
template void expand_blocks(const SparseGradient<std::uint64_t>&, SparseGradient<std::uint64_t>&);
template SparseGradient<std::uint32_t> group_blocks(const SparseGradient<std::uint32_t>&,
                                                    std::uint32_t);
template SparseGradient<std::uint64_t> group_blocks(const SparseGradient<std::uint64_t>&,
                                                    std::uint32_t);
template void merge_add<std::uint32_t>(std::span<const std::uint32_t>, std::span<const float>,
                                       std::span<const std::uint32_t>, std::span<const float>,
                                       std::vector<std::uint32_t>&, std::vector<float>&);
template void merge_add<std::uint64_t>(std::span<const std::uint64_t>, std::span<const float>,
                                       std::span<const std::uint64_t>, std::span<const float>,
                                       std::vector<std::uint64_t>&, std::vector<float>&);

}  // namespace atl::sparse
