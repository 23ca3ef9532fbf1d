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

namespace {

// Zipf(s) over ranks k = 1..n, P(k) ∝ k^-s, by rejection-inversion (Hörmann and Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", ACM TOMACS
// 1996): invert the integral H of the hat x^-s over [k - 1/2, k + 1/2], accept k outright when the
// inverted point lies close to it, else compare against H(k + 1/2) - h(k). O(1) expected per draw
// for every s >= 0 (s = 1 through the expm1/log1p forms below).
class ZipfSampler {
 public:
  ZipfSampler(std::uint64_t n, double s) : n_(static_cast<double>(n)), s_(s) {
    h_x1_ = H(1.5) - 1.0;
    h_n_ = H(n_ + 0.5);
    squeeze_ = 2.0 - H_inverse(H(2.5) - h(2.0));
  }
  // A rank in [1, n].
  std::uint64_t draw(SplitMix64& rng) const {
    for (;;) {
      const double u = h_n_ + rng.uniform_open() * (h_x1_ - h_n_);
      const double x = H_inverse(u);
      double k = std::floor(x + 0.5);
      k = std::clamp(k, 1.0, n_);
      if (k - x <= squeeze_ || u >= H(k + 0.5) - h(k)) return static_cast<std::uint64_t>(k);
    }
  }

 private:
  static double expm1_over(double t) { return std::abs(t) > 1e-8 ? std::expm1(t) / t : 1 + t / 2; }
  static double log1p_over(double t) { return std::abs(t) > 1e-8 ? std::log1p(t) / t : 1 - t / 2; }
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  // H(x) = (x^(1-s) - 1) / (1 - s), and log x at s = 1.
  double H(double x) const {
    const double lx = std::log(x);
    return expm1_over((1.0 - s_) * lx) * lx;
  }
  double H_inverse(double y) const {
    const double t = std::max(y * (1.0 - s_), -1.0 + 1e-16);
    return std::exp(log1p_over(t) * y);
  }
  double n_, s_, h_x1_ = 0, h_n_ = 0, squeeze_ = 0;
};

// Share of the Zipf mass over [0, M) that lies outside the nnz heaviest indices (integral
// estimate). Whatever nnz indices have been drawn, an undrawn index comes up with at least this
// probability, so successive sampling needs at most nnz / share draws in expectation.
double mass_outside_top(std::uint64_t M, std::uint64_t nnz, double s) {
  auto integral = [s](double a, double b) {  // ∫_a^b x^-s dx
    return s == 1.0 ? std::log(b / a) : (std::pow(b, 1 - s) - std::pow(a, 1 - s)) / (1 - s);
  };
  const double m = static_cast<double>(M), k = static_cast<double>(nnz);
  const double tail = integral(k + 0.5, m + 0.5);
  return tail / (1.0 + integral(1.5, m + 0.5));
}

// Successive sampling: i.i.d. Zipf draws, duplicates dropped, until nnz distinct indices — the
// same distribution as Efraimidis-Spirakis keys. Each batch draws exactly as many as are missing,
// so the set never overshoots and equals the distinct values of the first draws that reach nnz.
template <class Index>
std::vector<Index> sample_successive(std::uint64_t M, std::uint64_t nnz, double s,
                                     SplitMix64& rng) {
  const ZipfSampler zipf(M, s);
  std::vector<Index> chosen, batch;
  while (chosen.size() < nnz) {
    batch.resize(nnz - chosen.size());
    for (auto& x : batch) {
      if (s == 0.0) {
        x = static_cast<Index>((static_cast<unsigned __int128>(rng.next()) * M) >> 64);
      } else {
        x = static_cast<Index>(zipf.draw(rng) - 1);
      }
    }
    const auto old = static_cast<std::ptrdiff_t>(chosen.size());
    chosen.insert(chosen.end(), batch.begin(), batch.end());
    std::sort(chosen.begin() + old, chosen.end());
    std::inplace_merge(chosen.begin(), chosen.begin() + old, chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  }
  return chosen;
}

// Efraimidis-Spirakis over all M indices, streaming: key_i = log(u_i)·(i+1)^s, keep the nnz
// largest in a min-heap. O(M log nnz) time, O(nnz) memory; used where successive sampling would
// need more draws than M (high density or a steep exponent).
template <class Index>
std::vector<Index> sample_keys(std::uint64_t M, std::uint64_t nnz, double s, SplitMix64& rng) {
  using Key = std::pair<double, Index>;
  auto greater = [](const Key& a, const Key& b) { return a.first > b.first; };
  std::vector<Key> heap;
  heap.reserve(nnz);
  for (std::uint64_t i = 0; i < M; ++i) {
    const double key = std::log(rng.uniform_open()) * std::pow(static_cast<double>(i + 1), s);
    if (heap.size() < nnz) {
      heap.emplace_back(key, static_cast<Index>(i));
      std::push_heap(heap.begin(), heap.end(), greater);
    } else if (key > heap.front().first) {
      std::pop_heap(heap.begin(), heap.end(), greater);
      heap.back() = {key, static_cast<Index>(i)};
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  }
  std::vector<Index> out(heap.size());
  for (std::size_t k = 0; k < heap.size(); ++k) out[k] = heap[k].second;
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

template <class Index>
SparseGradient<Index> generate_gradient(const GeneratorOptions& o, int rank) {
  validate(o);
  if (o.elements > max_elements<Index>()) {
    throw std::invalid_argument(
        fmt::format("M = {} does not fit {}-bit indices", o.elements, 8 * sizeof(Index)));
  }
  const std::uint64_t M = o.elements;
  const auto nnz = std::min<std::uint64_t>(
      M, static_cast<std::uint64_t>(std::llround(o.density * static_cast<double>(M))));
  SplitMix64 rng{o.seed * 0x100000001b3ull + static_cast<std::uint64_t>(rank) + 1};
  SparseGradient<Index> g;
  g.elements = M;
  if (nnz == M) {
    g.indices.resize(M);
    std::iota(g.indices.begin(), g.indices.end(), Index{0});
  } else if (nnz > 0) {
    const double share = mass_outside_top(M, nnz, o.zipf_exponent);
    const bool few_draws = static_cast<double>(nnz) <= share * static_cast<double>(M) / 4;
    g.indices = few_draws ? sample_successive<Index>(M, nnz, o.zipf_exponent, rng)
                          : sample_keys<Index>(M, nnz, o.zipf_exponent, rng);
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

namespace detail {
template <class Index>
std::vector<Index> sample_successive(std::uint64_t M, std::uint64_t nnz, double s,
                                     std::uint64_t seed) {
  SplitMix64 rng{seed};
  return atl::sparse::sample_successive<Index>(M, nnz, s, rng);
}
template <class Index>
std::vector<Index> sample_keys(std::uint64_t M, std::uint64_t nnz, double s, std::uint64_t seed) {
  SplitMix64 rng{seed};
  return atl::sparse::sample_keys<Index>(M, nnz, s, rng);
}
template std::vector<std::uint32_t> sample_successive(std::uint64_t, std::uint64_t, double,
                                                      std::uint64_t);
template std::vector<std::uint32_t> sample_keys(std::uint64_t, std::uint64_t, double,
                                                std::uint64_t);
}  // namespace detail

template SparseGradient<std::uint32_t> generate_gradient(const GeneratorOptions&, int);
template SparseGradient<std::uint64_t> generate_gradient(const GeneratorOptions&, int);

}  // namespace atl::sparse
