#include "embedding_rows.h"

#include <algorithm>

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
  } else {
    const auto& idx = result.sparse.indices;
    const auto& val = result.sparse.values;
    std::size_t k = 0;
    while (k < idx.size()) {
      const auto row = static_cast<std::int64_t>(idx[k] / static_cast<Index>(E));
      std::size_t end = k;
      while (end < idx.size() && static_cast<std::int64_t>(idx[end] / static_cast<Index>(E)) == row)
        ++end;
      add_row(row, [&](float* dst) {
        for (std::size_t q = k; q < end; ++q) dst[idx[q] - static_cast<Index>(row * E)] = val[q];
      });
      k = end;
    }
  }
  return out;
}

template RowGradient touched_rows(const sync::SyncResult<std::uint32_t>&, std::int64_t, double);
template RowGradient touched_rows(const sync::SyncResult<std::uint64_t>&, std::int64_t, double);

}  // namespace atl::train
