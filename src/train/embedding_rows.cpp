#include "embedding_rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace atl::train {

template <class Index>
RowGradient touched_rows(const sync::SyncResult<Index>& result, std::int64_t E, double scale) {
  RowGradient out;
  const auto fs = static_cast<float>(scale);
  auto add_row = [&](std::int64_t row, auto&& fill) {
    const std::size_t at = out.values.size();
    out.values.resize(at + static_cast<std::size_t>(E), 0.0f);
    fill(out.values.data() + at);
    bool any = false;
    for (std::int64_t j = 0; j < E; ++j) any |= out.values[at + j] != 0.0f;
    if (!any) {
      out.values.resize(at);
      return;
    }
    for (std::int64_t j = 0; j < E; ++j) out.values[at + j] *= fs;
    out.rows.push_back(row);
  };
  if (result.dense_form) {
    const auto V = static_cast<std::int64_t>(result.dense.size()) / E;
    for (std::int64_t row = 0; row < V; ++row) {
      const float* src = result.dense.data() + row * E;
      bool any = false;
      for (std::int64_t j = 0; j < E && !any; ++j) any = src[j] != 0.0f;
      if (any) add_row(row, [&](float* dst) { std::copy(src, src + E, dst); });
    }
  } else if (result.sparse.width > 1) {
    if (result.sparse.width != static_cast<std::uint64_t>(E)) {
      throw std::logic_error(fmt::format("touched_rows: a result of blocks of {} for rows of {}",
                                         result.sparse.width, E));
    }
    // One pass per row: each value scaled as it is copied (the same product as add_row's), a row
    // of zeros dropped as add_row drops it.
    const auto& idx = result.sparse.indices;
    const auto e = static_cast<std::size_t>(E);
    out.values.resize(idx.size() * e);
    out.rows.reserve(idx.size());
    float* dst = out.values.data();
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const float* src = result.block(k);  // the result's values or a view
      bool any = false;
      for (std::size_t j = 0; j < e; ++j) {
        dst[j] = src[j] * fs;
        any |= src[j] != 0.0f;
      }
      if (any) {
        out.rows.push_back(static_cast<std::int64_t>(idx[k]));
        dst += e;
      }
    }
    out.values.resize(static_cast<std::size_t>(dst - out.values.data()));
  } else {
    // One pass in index order: a row's entries are consecutive (the result is sorted), found by
    // comparing with the row's end instead of dividing every index; each value scaled as it is
    // placed (the same product as add_row's), a row of zeros dropped as add_row drops it.
    const auto& idx = result.sparse.indices;
    const auto& val = result.sparse.values;
    const std::size_t n = idx.size();
    const auto e = static_cast<std::uint64_t>(E);
    out.values.reserve(n + static_cast<std::size_t>(E));  // rows are mostly whole
    std::size_t k = 0;
    while (k < n) {
      const std::uint64_t row = static_cast<std::uint64_t>(idx[k]) / e, base = row * e;
      const std::uint64_t row_end = base + e;
      const std::size_t at = out.values.size();
      out.values.resize(at + static_cast<std::size_t>(E), 0.0f);
      float* dst = out.values.data() + at;
      bool any = false;
      for (; k < n && static_cast<std::uint64_t>(idx[k]) < row_end; ++k) {
        dst[static_cast<std::uint64_t>(idx[k]) - base] = val[k] * fs;
        any |= val[k] != 0.0f;
      }
      if (any) {
        out.rows.push_back(static_cast<std::int64_t>(row));
      } else {
        out.values.resize(at);
      }
    }
  }
  return out;
}

bool RowGradient::row_skipped(std::size_t k, std::size_t E) const {
  if (!is_in_place()) return false;
  const float* v = in_place[k];
  bool any = false;
  for (std::size_t j = 0; j < E; ++j) any |= v[j] != 0.0f;
  return !any;
}

template <class Index>
RowGradient in_place_rows(const sync::SyncResult<Index>& result, std::int64_t E, double scale) {
  if (result.dense_form || result.sparse.width != static_cast<std::uint64_t>(E) || E <= 1)
    return touched_rows(result, E, scale);
  RowGradient out;
  out.rows.assign(result.sparse.indices.begin(), result.sparse.indices.end());
  out.in_place.resize(out.rows.size());
  for (std::size_t k = 0; k < out.rows.size(); ++k) out.in_place[k] = result.block(k);
  out.scale = static_cast<float>(scale);
  out.read_in_place = true;
  return out;
}

RowGradient owned_rows(const RowGradient& rows, std::int64_t E) {
  if (!rows.is_in_place()) return rows;
  const auto e = static_cast<std::size_t>(E);
  RowGradient out;
  out.values.reserve(rows.rows.size() * static_cast<std::size_t>(E));
  for (std::size_t k = 0; k < rows.rows.size(); ++k) {
    if (rows.row_skipped(k, e)) continue;
    out.rows.push_back(rows.rows[k]);
    const float* v = rows.row_values(k, e);
    for (std::size_t j = 0; j < e; ++j) out.values.push_back(v[j] * rows.scale);
  }
  return out;
}

template RowGradient in_place_rows(const sync::SyncResult<std::uint32_t>&, std::int64_t, double);
template RowGradient in_place_rows(const sync::SyncResult<std::uint64_t>&, std::int64_t, double);

template <class Index>
void set_row_weights(const sparse::SparseGradient<Index>& local, std::int64_t E, float weight,
                     std::vector<float>& weights) {
  const std::uint64_t per_row = local.width == 1 ? static_cast<std::uint64_t>(E) : 1;
  for (const auto index : local.indices) {
    const auto row = static_cast<std::uint64_t>(index) / per_row;
    if (row >= weights.size()) throw std::out_of_range("set_row_weights: row out of range");
    weights[row] = weight;  // a row's elements (width 1) set it once each: the same weight
  }
}

void divide_by_row_weights(RowGradient& rows, std::int64_t E, const std::vector<float>& weights) {
  if (rows.is_in_place()) throw std::logic_error("divide_by_row_weights: rows read in place");
  const auto e = static_cast<std::size_t>(E);
  for (std::size_t k = 0; k < rows.rows.size(); ++k) {
    const auto row = static_cast<std::size_t>(rows.rows[k]);
    if (row >= weights.size()) throw std::out_of_range("divide_by_row_weights: row out of range");
    const float s = weights[row];
    if (!(s > 0.0f)) continue;
    for (std::size_t j = 0; j < e; ++j) rows.values[k * e + j] /= s;
  }
}

template void set_row_weights(const sparse::SparseGradient<std::uint32_t>&, std::int64_t, float,
                              std::vector<float>&);
template void set_row_weights(const sparse::SparseGradient<std::uint64_t>&, std::int64_t, float,
                              std::vector<float>&);
template RowGradient touched_rows(const sync::SyncResult<std::uint32_t>&, std::int64_t, double);
template RowGradient touched_rows(const sync::SyncResult<std::uint64_t>&, std::int64_t, double);

}  // namespace atl::train
