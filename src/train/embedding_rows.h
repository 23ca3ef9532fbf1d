// The embedding's aggregated gradient as rows: what the row-wise optimizer consumes. Free of
// LibTorch. Private to src/train.
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/sync/scheme.h"

namespace atl::train {

// The embedding's aggregated gradient as touched rows and their values (rows × d_embed).
struct RowGradient {
  std::vector<std::int64_t> rows;
  std::vector<float> values;
};

// Rows with any non-zero entry in the summed gradient (M = rows × E elements, either result form;
// a sparse result of width 1 or E), each multiplied by `scale` (1 / world size: the mean). Every
// form gives the same rows (a row whose sum is exactly zero everywhere is skipped by all).
template <class Index>
RowGradient touched_rows(const sync::SyncResult<Index>& result, std::int64_t E, double scale);

// Local SGD's mean over the workers that touched a row (--embedding-mean touched):
// `weights[r]` := `weight` for every row r that `local` (a pseudo-gradient over `weights.size()`
// rows of E values, width E or 1) holds; summed over the workers, each row's touching weight.
template <class Index>
void set_row_weights(const sparse::SparseGradient<Index>& local, std::int64_t E, float weight,
                     std::vector<float>& weights);
// Each row of `rows` (Σ_i w_i Δ_i) divided by its touching weight; a row of weight 0 (only exact
// zeros were sent for it) is left as it is.
void divide_by_row_weights(RowGradient& rows, std::int64_t E, const std::vector<float>& weights);

}  // namespace atl::train
