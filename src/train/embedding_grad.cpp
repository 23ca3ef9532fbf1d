#include "embedding_grad.h"

namespace atl::train {

template <class Index>
sparse::SparseGradient<Index> embedding_gradient(const torch::Tensor& weight,
                                                 const torch::Tensor& rows_held, std::int64_t vocab,
                                                 bool as_rows) {
  const bool compact = rows_held.defined();
  const auto V = compact ? vocab : weight.size(0), E = weight.size(1);
  sparse::SparseGradient<Index> g;
  g.elements = static_cast<std::uint64_t>(V * E);
  if (as_rows) g.width = static_cast<std::uint32_t>(E);
  const auto& grad = weight.grad();
  if (!grad.defined()) return g;
  auto coalesced = grad.coalesce();
  auto rows = coalesced._indices()[0].contiguous();
  auto values = coalesced._values().contiguous();
  const auto n = rows.size(0);
  if (compact) rows = rows_held.index_select(0, rows);  // compact rows -> ids (still sorted)
  const auto* r = rows.data_ptr<std::int64_t>();
  const auto* v = values.data_ptr<float>();
  g.values.assign(v, v + n * E);
  if (as_rows) {
    g.indices.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) g.indices[i] = static_cast<Index>(r[i]);
    return g;
  }
  g.indices.resize(static_cast<std::size_t>(n * E));
  for (std::int64_t i = 0; i < n; ++i) {
    const Index base = static_cast<Index>(r[i] * E);
    for (std::int64_t j = 0; j < E; ++j) g.indices[i * E + j] = base + static_cast<Index>(j);
  }
  return g;
}

template sparse::SparseGradient<std::uint32_t> embedding_gradient(const torch::Tensor&,
                                                                  const torch::Tensor&,
                                                                  std::int64_t, bool);
template sparse::SparseGradient<std::uint64_t> embedding_gradient(const torch::Tensor&,
                                                                  const torch::Tensor&,
                                                                  std::int64_t, bool);

}  // namespace atl::train
