// The token embedding's gradient (LibTorch sparse COO over rows) as an element-level sparse
// gradient over M = vocab × E, the form the synchronization schemes take. Private to src/train.
#pragma once

#include <torch/torch.h>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::train {

// Empty (nnz 0) when the weight has no gradient on this rank. `rows_held` (Gpt::tok_rows): the
// ids of the weight's rows when it holds only some rows of a `vocab`-row table (the sharded
// embedding); undefined: the whole table.
template <class Index>
sparse::SparseGradient<Index> embedding_gradient(const torch::Tensor& weight,
                                                 const torch::Tensor& rows_held = {},
                                                 std::int64_t vocab = 0);

}  // namespace atl::train
