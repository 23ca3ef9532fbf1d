// The embedding's aggregated gradient as rows: what the row-wise optimizer consumes. Free of
// LibTorch. Private to src/train.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/sync/scheme.h"

namespace atl::train {

// The embedding's aggregated gradient as touched rows and their values (rows × d_embed): owned
// (`values`), or read where the synchronization left them (`in_place`, in_place_rows: the
// result's values or the pulled blocks themselves), each value multiplied by `scale` where it is
// read and a row whose stored values are all zero skipped by every reader (touched_rows drops
// such a row). Readers take the values with row_values() and row_skipped(), which serve both
// forms; owned_rows() makes an in-place form owned.
struct RowGradient {
  std::vector<std::int64_t> rows;
  std::vector<float> values;           // owned: rows × E, already scaled, no row of zeros
  std::vector<const float*> in_place;  // in place: each row's E values, to be scaled
  float scale = 1.0f;                  // in place: 1/n; owned: 1 (the values are scaled)
  bool read_in_place = false;          // which of the two holds the values
  bool is_in_place() const { return read_in_place; }
  const float* row_values(std::size_t k, std::size_t E) const {
    return is_in_place() ? in_place[k] : values.data() + k * E;
  }
  // In place: a row of stored zeros, which touched_rows would have dropped.
  bool row_skipped(std::size_t k, std::size_t E) const;
};

// Rows with any non-zero entry in the summed gradient (M = rows × E elements, either result form;
// a sparse result of width 1 or E), each multiplied by `scale` (1 / world size: the mean). Every
// form gives the same rows (a row whose sum is exactly zero everywhere is skipped by all).
template <class Index>
RowGradient touched_rows(const sync::SyncResult<Index>& result, std::int64_t E, double scale);

// The same rows without copying their values when the result is a sparse one of rows of E (Zen's
// row form, its values in the result or in views of the pulled blocks): ids copied, values read
// in place (`result`, and the scheme for views, must outlive the rows), scaled where read; any
// other form: touched_rows. Every reader sees the values touched_rows would give,
// bit for bit (each is the same float product).
template <class Index>
RowGradient in_place_rows(const sync::SyncResult<Index>& result, std::int64_t E, double scale);

// An owned copy of `rows` (touched_rows' form) if it is in place, else `rows` itself.
RowGradient owned_rows(const RowGradient& rows, std::int64_t E);

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
