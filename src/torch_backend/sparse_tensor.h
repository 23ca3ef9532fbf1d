// A torch sparse COO tensor as the sparse gradient the synchronization schemes take, and a
// scheme's result back as a coalesced sparse tensor of the input's shape and layout. A hybrid
// tensor (sparse_dim s, dense_dim d: an nn.Embedding(sparse=True) gradient is rows × width)
// becomes a gradient of rows (SparseGradient::width = the elements per dense block; row index =
// the row-major index over the s sparse dimensions): Zen carries one index per row, the other
// schemes expand rows into elements. Private to the atoll_torch module (no Python here).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "atoll/sync/scheme.h"

namespace atl::torch_backend {

// What one sparse tensor became on this rank.
struct SparseShape {
  std::uint64_t elements = 0;       // M: every element of the dense tensor
  std::int64_t blocks = 0;          // non-zero blocks (rows) on input, after coalescing
  std::int64_t block_elements = 1;  // elements per block (the dense dimensions' product)
};

// `g` becomes the gradient of a float32 sparse COO tensor on the CPU (coalesced here if it is
// not); its buffers are reused (a caller keeps one `g` across calls: no page faults per call).
// std::invalid_argument naming the problem for another dtype, device or layout.
template <class Index>
void to_gradient(const at::Tensor& tensor, SparseShape& shape, sparse::SparseGradient<Index>& g);

// Makes `tensor` (sparse COO, as passed to to_gradient) the sum, coalesced, in place, with its
// sizes, sparse_dim and dense_dim: every block (row) holding at least one entry of the result (a
// sparse result's explicit zeros included; a dense result's zeros are absent), its other elements
// 0. New index and value tensors replace the old ones (no copy of the result).
template <class Index>
void set_sum(at::Tensor& tensor, const sync::SyncResult<Index>& result);

}  // namespace atl::torch_backend
