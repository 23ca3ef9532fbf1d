// The token embedding's gradient (LibTorch sparse COO over rows) as an element-level sparse
// gradient over M = vocab × E, the form the synchronization schemes take. Private to src/train.
#pragma once

#include <torch/torch.h>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::train {

// Empty (nnz 0) when the weight has no gradient on this rank.
template <class Index>
sparse::SparseGradient<Index> embedding_gradient(const torch::Tensor& weight);

}  // namespace atl::train
