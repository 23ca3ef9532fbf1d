#include "sparse_tensor.h"

#include <ATen/SparseTensorUtils.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace atl::torch_backend {

namespace {

// Elements per block: the product of the dense dimensions' sizes.
std::int64_t block_elements(const at::Tensor& t) {
  std::int64_t block = 1;
  for (std::int64_t k = t.sparse_dim(); k < t.dim(); ++k) block *= t.size(k);
  return block;
}

}  // namespace

template <class Index>
void to_gradient(const at::Tensor& tensor, SparseShape& shape, sparse::SparseGradient<Index>& g) {
  if (tensor.layout() != at::kSparse) throw std::invalid_argument("not a sparse COO tensor");
  if (tensor.device().type() != at::kCPU) {
    throw std::invalid_argument(
        fmt::format("the tensor is on {}, atoll takes CPU tensors", tensor.device().str()));
  }
  if (tensor.scalar_type() != at::kFloat) {
    throw std::invalid_argument(fmt::format("sparse allreduce sums float32 values, not {}",
                                            c10::toString(tensor.scalar_type())));
  }
  const at::Tensor t = tensor.is_coalesced() ? tensor : tensor.coalesce();
  const std::int64_t sd = t.sparse_dim(), block = block_elements(t);
  const auto sizes = t.sizes();
  shape.elements = 1;
  for (const auto s : sizes) shape.elements *= static_cast<std::uint64_t>(s);
  if (shape.elements > sparse::max_elements<Index>()) {
    throw std::invalid_argument(
        fmt::format("{} elements do not fit the index type", shape.elements));
  }
  const at::Tensor idx = t._indices().contiguous();
  const at::Tensor val = t._values().contiguous();
  const std::int64_t nnz = idx.size(1);
  shape.blocks = nnz;
  shape.block_elements = block;
  const auto* ip = idx.data_ptr<std::int64_t>();
  const auto* vp = val.data_ptr<float>();
  g.elements = shape.elements;
  g.values.resize(static_cast<std::size_t>(nnz * block));
  if (nnz > 0) std::memcpy(g.values.data(), vp, g.values.size() * sizeof(float));
  if (block > 1 && block <= std::int64_t{UINT32_MAX}) {
    // Rows: one index per block (Zen carries rows as rows; the other schemes expand them).
    g.width = static_cast<std::uint32_t>(block);
    g.indices.resize(static_cast<std::size_t>(nnz));
    for (std::int64_t i = 0; i < nnz; ++i) {
      std::uint64_t l = 0;
      for (std::int64_t k = 0; k < sd; ++k)
        l = l * static_cast<std::uint64_t>(sizes[k]) + static_cast<std::uint64_t>(ip[k * nnz + i]);
      g.indices[static_cast<std::size_t>(i)] = static_cast<Index>(l);
    }
    return;
  }
  g.width = 1;
  g.indices.resize(static_cast<std::size_t>(nnz * block));
  for (std::int64_t i = 0; i < nnz; ++i) {
    std::uint64_t l = 0;  // row-major index over the sparse dimensions
    for (std::int64_t k = 0; k < sd; ++k) {
      l = l * static_cast<std::uint64_t>(sizes[k]) + static_cast<std::uint64_t>(ip[k * nnz + i]);
    }
    const std::uint64_t base = l * static_cast<std::uint64_t>(block);
    for (std::int64_t j = 0; j < block; ++j) {
      g.indices[static_cast<std::size_t>(i * block + j)] = static_cast<Index>(base + j);
    }
  }
}

namespace {

// Calls f(element, value) for every entry of the result, in increasing element order.
template <class Index, class F>
void for_each_entry(const sync::SyncResult<Index>& result, F&& f) {
  if (result.dense_form) {
    for (std::size_t e = 0; e < result.dense.size(); ++e) {
      if (result.dense[e] != 0.0f) f(static_cast<std::uint64_t>(e), result.dense[e]);
    }
  } else {
    const auto& r = result.sparse;  // rows (width > 1) or elements
    const std::size_t w = r.width;
    for (std::size_t i = 0; i < r.values.size(); ++i)
      f(static_cast<std::uint64_t>(r.indices[i / w]) * w + i % w, r.values[i]);
  }
}

}  // namespace

// Two passes over the result (count the blocks, then fill), straight into the tensors' storage.
template <class Index>
void set_sum(at::Tensor& tensor, const sync::SyncResult<Index>& result) {
  const std::int64_t sd = tensor.sparse_dim(), dim = tensor.dim();
  const auto block = static_cast<std::uint64_t>(block_elements(tensor));
  const std::vector<std::int64_t> sizes(tensor.sizes().begin(), tensor.sizes().end());
  if (sd == 1 && block == 1 && !result.dense_form &&
      result.sparse.width == 1) {  // a vector: the result's arrays as they are
    const auto& r = result.sparse;
    const auto n = static_cast<std::int64_t>(r.nnz());
    at::Tensor idx = at::empty({1, n}, at::kLong);
    at::Tensor val = at::empty({n}, at::kFloat);
    std::copy(r.indices.begin(), r.indices.end(), idx.data_ptr<std::int64_t>());
    std::copy(r.values.begin(), r.values.end(), val.data_ptr<float>());
    at::sparse::get_sparse_impl(tensor)->set_indices_and_values_unsafe(idx, val);
    tensor._coalesced_(true);
    return;
  }
  std::int64_t n = 0;
  std::uint64_t last = ~std::uint64_t{0};
  for_each_entry(result, [&](std::uint64_t e, float) {
    if (e / block != last) ++n, last = e / block;
  });
  std::vector<std::int64_t> value_sizes{n};
  for (std::int64_t k = sd; k < dim; ++k) value_sizes.push_back(sizes[static_cast<std::size_t>(k)]);
  at::Tensor idx = at::empty({sd, n}, at::kLong);
  at::Tensor val =
      block == 1 ? at::empty(value_sizes, at::kFloat) : at::zeros(value_sizes, at::kFloat);
  auto* ip = idx.data_ptr<std::int64_t>();
  auto* vp = val.data_ptr<float>();
  std::int64_t i = -1;
  last = ~std::uint64_t{0};
  for_each_entry(result, [&](std::uint64_t e, float v) {
    const std::uint64_t l = e / block;
    if (l != last) {
      ++i, last = l;
      auto rest = static_cast<std::int64_t>(l);
      for (std::int64_t k = sd - 1; k >= 0; --k) {
        ip[k * n + i] = rest % sizes[static_cast<std::size_t>(k)];
        rest /= sizes[static_cast<std::size_t>(k)];
      }
    }
    vp[static_cast<std::uint64_t>(i) * block + e % block] = v;
  });
  at::sparse::get_sparse_impl(tensor)->set_indices_and_values_unsafe(idx, val);
  tensor._coalesced_(true);
}

template void to_gradient(const at::Tensor&, SparseShape&, sparse::SparseGradient<std::uint32_t>&);
template void to_gradient(const at::Tensor&, SparseShape&, sparse::SparseGradient<std::uint64_t>&);
template void set_sum(at::Tensor&, const sync::SyncResult<std::uint32_t>&);
template void set_sum(at::Tensor&, const sync::SyncResult<std::uint64_t>&);

}  // namespace atl::torch_backend
