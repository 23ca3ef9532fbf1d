#include "atoll/sparse/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace atl::sparse {

void validate(const GeneratorOptions& o) {
  if (o.elements == 0) throw std::invalid_argument("--elements must be positive (got 0)");
  if (!(o.density >= 0.0 && o.density <= 1.0)) {
    throw std::invalid_argument(fmt::format("--density must be in [0, 1] (got {})", o.density));
  }
  if (!(o.zipf_exponent >= 0.0) || !std::isfinite(o.zipf_exponent)) {
    throw std::invalid_argument(
        fmt::format("--zipf must be a finite exponent >= 0 (got {})", o.zipf_exponent));
  }
}

namespace {
// splitmix64: a small, well-known seed sequence generator (Steele et al.), portable and fast.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform_open() {  // (0, 1)
    return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  }
};
}  // namespace

template <class Index>
SparseGradient<Index> generate_gradient(const GeneratorOptions& o, int rank) {
  validate(o);
  if (o.elements > max_elements<Index>()) {
    throw std::invalid_argument(
        fmt::format("M = {} does not fit {}-bit indices", o.elements, 8 * sizeof(Index)));
  }
  const std::uint64_t M = o.elements;
  const auto nnz = static_cast<std::uint64_t>(std::llround(o.density * static_cast<double>(M)));
  SplitMix64 rng{o.seed * 0x100000001b3ull + static_cast<std::uint64_t>(rank) + 1};
  SparseGradient<Index> g;
  g.elements = M;
  if (nnz == M) {
    g.indices.resize(M);
    std::iota(g.indices.begin(), g.indices.end(), Index{0});
  } else if (nnz > 0) {
    // Key_i = log(u_i) · (i+1)^s (≤ 0); the nnz largest keys are a weighted sample without
    // replacement with weights (i+1)^-s.
    std::vector<std::pair<double, Index>> keys(M);
    for (std::uint64_t i = 0; i < M; ++i) {
      const double w = std::pow(static_cast<double>(i + 1), o.zipf_exponent);
      keys[i] = {std::log(rng.uniform_open()) * w, static_cast<Index>(i)};
    }
    std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(nnz), keys.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    g.indices.resize(nnz);
    for (std::uint64_t k = 0; k < nnz; ++k) g.indices[k] = keys[k].second;
    std::sort(g.indices.begin(), g.indices.end());
  }
  g.values.resize(g.indices.size());
  for (auto& v : g.values) {
    if (o.values == ValueKind::integer) {
      const auto r = rng.next();
      const float mag = static_cast<float>(1 + (r >> 8) % 16);
      v = (r & 1) ? mag : -mag;
    } else {
      // Box-Muller
      const double u1 = rng.uniform_open(), u2 = rng.uniform_open();
      v = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
  }
  return g;
}

template SparseGradient<std::uint32_t> generate_gradient(const GeneratorOptions&, int);
template SparseGradient<std::uint64_t> generate_gradient(const GeneratorOptions&, int);

}  // namespace atl::sparse
