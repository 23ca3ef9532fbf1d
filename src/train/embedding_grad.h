// The token embedding's gradient (LibTorch sparse COO over rows) as a sparse gradient over
// M = vocab × E: of rows (width E, one index per row: what Zen carries natively) or of elements
// (one index per value, the form before issue 18 item 7). Private to src/train.
#pragma once

#include <torch/torch.h>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::train {

// Empty (nnz 0) when the weight has no gradient on this rank. `rows_held` (Gpt::tok_rows): the
// ids of the weight's rows when it holds only some rows of a `vocab`-row table (the sharded
// embedding); undefined: the whole table. `as_rows`: width E (else element form, width 1).
template <class Index>
sparse::SparseGradient<Index> embedding_gradient(const torch::Tensor& weight,
                                                 const torch::Tensor& rows_held = {},
                                                 std::int64_t vocab = 0, bool as_rows = false);

}  // namespace atl::train
