#include "sparse_tensor.h"

#include <fmt/format.h>

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
sparse::SparseGradient<Index> to_gradient(const at::Tensor& tensor, SparseShape& shape) {
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
  sparse::SparseGradient<Index> g;
  g.elements = shape.elements;
  g.indices.resize(static_cast<std::size_t>(nnz * block));
  g.values.resize(static_cast<std::size_t>(nnz * block));
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
  if (nnz > 0) std::memcpy(g.values.data(), vp, g.values.size() * sizeof(float));
  return g;
}

template <class Index>
at::Tensor to_tensor(const sync::SyncResult<Index>& result, const at::Tensor& like) {
  const std::int64_t sd = like.sparse_dim(), block = block_elements(like);
  const auto sizes = like.sizes();
  std::vector<std::int64_t> rows;  // the blocks' row-major indices, increasing
  std::vector<float> values;
  const auto add = [&](std::uint64_t e, float v) {
    const auto l = static_cast<std::int64_t>(e / static_cast<std::uint64_t>(block));
    if (rows.empty() || rows.back() != l) {
      rows.push_back(l);
      values.resize(values.size() + static_cast<std::size_t>(block), 0.0f);
    }
    values[(rows.size() - 1) * static_cast<std::size_t>(block) +
           static_cast<std::size_t>(e % static_cast<std::uint64_t>(block))] = v;
  };
  if (result.dense_form) {
    for (std::size_t e = 0; e < result.dense.size(); ++e) {
      if (result.dense[e] != 0.0f) add(e, result.dense[e]);
    }
  } else {
    for (std::size_t i = 0; i < result.sparse.nnz(); ++i) {
      add(result.sparse.indices[i], result.sparse.values[i]);
    }
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  at::Tensor idx = at::empty({sd, n}, at::kLong);
  auto* ip = idx.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t l = rows[static_cast<std::size_t>(i)];
    for (std::int64_t k = sd - 1; k >= 0; --k) {
      ip[k * n + i] = l % sizes[k];
      l /= sizes[k];
    }
  }
  std::vector<std::int64_t> value_sizes{n};
  for (std::int64_t k = sd; k < like.dim(); ++k) value_sizes.push_back(sizes[k]);
  at::Tensor val = at::empty(value_sizes, at::kFloat);
  if (!values.empty()) std::memcpy(val.data_ptr<float>(), values.data(), values.size() * 4);
  at::Tensor out = at::_sparse_coo_tensor_unsafe(idx, val, sizes);
  out._coalesced_(true);
  return out;
}

template sparse::SparseGradient<std::uint32_t> to_gradient(const at::Tensor&, SparseShape&);
template sparse::SparseGradient<std::uint64_t> to_gradient(const at::Tensor&, SparseShape&);
template at::Tensor to_tensor(const sync::SyncResult<std::uint32_t>&, const at::Tensor&);
template at::Tensor to_tensor(const sync::SyncResult<std::uint64_t>&, const at::Tensor&);

}  // namespace atl::torch_backend
