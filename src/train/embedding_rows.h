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

}  // namespace atl::train
