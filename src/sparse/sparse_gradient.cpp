#include "atoll/sparse/sparse_gradient.h"

#include <fmt/format.h>

namespace atl::sparse {

template <class Index>
std::optional<std::string> SparseGradient<Index>::check() const {
  if (indices.size() != values.size()) {
    return fmt::format("sparse gradient has {} indices but {} values", indices.size(),
                       values.size());
  }
  if (elements > max_elements<Index>()) {
    return fmt::format("element count {} does not fit {}-bit indices", elements, 8 * sizeof(Index));
  }
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= elements) {
      return fmt::format("index {} at position {} is out of range: must be < M = {}",
                         static_cast<std::uint64_t>(indices[i]), i, elements);
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
  for (std::size_t i = 0; i < indices.size(); ++i) dense[indices[i]] = values[i];
  return dense;
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
template void merge_add<std::uint32_t>(std::span<const std::uint32_t>, std::span<const float>,
                                       std::span<const std::uint32_t>, std::span<const float>,
                                       std::vector<std::uint32_t>&, std::vector<float>&);
template void merge_add<std::uint64_t>(std::span<const std::uint64_t>, std::span<const float>,
                                       std::span<const std::uint64_t>, std::span<const float>,
                                       std::vector<std::uint64_t>&, std::vector<float>&);

}  // namespace atl::sparse
