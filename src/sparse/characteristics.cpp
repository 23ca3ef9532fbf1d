#include "atoll/sparse/characteristics.h"

#include <fmt/format.h>

#include <algorithm>

namespace atl::sparse {
namespace {

template <class Index>
std::size_t intersection_size(const std::vector<Index>& a, const std::vector<Index>& b) {
  std::size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j])
      ++i;
    else if (b[j] < a[i])
      ++j;
    else {
      ++both;
      ++i;
      ++j;
    }
  }
  return both;
}

template <class Index>
std::vector<Index> union_of(std::span<const SparseGradient<Index>> w, std::size_t first,
                            std::size_t count) {
  std::vector<Index> u;
  for (std::size_t r = first; r < first + count; ++r) {
    std::vector<Index> merged;
    merged.reserve(u.size() + w[r].indices.size());
    std::set_union(u.begin(), u.end(), w[r].indices.begin(), w[r].indices.end(),
                   std::back_inserter(merged));
    u.swap(merged);
  }
  return u;
}

}  // namespace

template <class Index>
Characteristics characterize(std::span<const SparseGradient<Index>> w) {
  Characteristics c;
  if (w.empty()) throw InvalidGradient("no gradients to characterize");
  const std::size_t n = w.size();
  c.workers = static_cast<int>(n);
  c.elements = w[0].elements;
  double total_nnz = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (w[r].elements != c.elements) {
      throw InvalidGradient(fmt::format("worker {} has M = {} but worker 0 has M = {}", r,
                                        w[r].elements, c.elements));
    }
    w[r].validate();
    total_nnz += static_cast<double>(w[r].nnz());
  }
  const double mean_nnz = total_nnz / n;
  c.density = mean_nnz / static_cast<double>(c.elements);

  double overlap_sum = 0;
  std::size_t pairs = 0;
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a + 1; b < n; ++b) {
      const auto smaller = std::min(w[a].nnz(), w[b].nnz());
      if (smaller == 0) continue;
      overlap_sum += static_cast<double>(intersection_size(w[a].indices, w[b].indices)) / smaller;
      ++pairs;
    }
  }
  c.overlap = pairs ? overlap_sum / pairs : 0.0;

  for (std::size_t g = 1; g <= n; g *= 2) {
    double sum = 0;
    std::size_t groups = 0;
    for (std::size_t first = 0; first + g <= n; first += g, ++groups) {
      sum += static_cast<double>(union_of<Index>(w, first, g).size());
    }
    c.gamma_pow2.push_back(mean_nnz > 0 ? sum / groups / mean_nnz : 1.0);
  }
  c.densification =
      mean_nnz > 0 ? static_cast<double>(union_of<Index>(w, 0, n).size()) / mean_nnz : 1.0;

  double skew_sum = 0, first_share = 0;
  std::size_t counted = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (w[r].nnz() == 0) continue;
    std::vector<std::size_t> per_range(n, 0);
    for (auto x : w[r].indices) {
      per_range[static_cast<std::size_t>(static_cast<unsigned __int128>(x) * n / c.elements)]++;
    }
    const double max_range =
        static_cast<double>(*std::max_element(per_range.begin(), per_range.end()));
    skew_sum += max_range * n / static_cast<double>(w[r].nnz());
    first_share += static_cast<double>(per_range[0]) / static_cast<double>(w[r].nnz());
    ++counted;
  }
  c.skew = counted ? skew_sum / counted : 1.0;
  c.first_range_share = counted ? first_share / counted : 0.0;
  return c;
}

template Characteristics characterize(std::span<const SparseGradient<std::uint32_t>>);
template Characteristics characterize(std::span<const SparseGradient<std::uint64_t>>);

}  // namespace atl::sparse
