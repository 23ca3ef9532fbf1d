// Synthetic sparse gradients with the structure of real embedding gradients: index popularity
// follows a Zipf law over [0, M) with small ids hottest (like a frequency-sorted vocabulary), so
// skew, overlap between workers and densification arise as they do in training.
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::sparse {

enum class ValueKind {
  normal,   // N(0, 1) floats: sums exact only within rounding
  integer,  // non-zero integers in [-16, 16]: sums of up to 2^20 of them are exact in float
};

struct GeneratorOptions {
  std::uint64_t elements = 1 << 20;  // M
  double density = 0.01;             // nnz = round(density · M), in [0, 1]
  double zipf_exponent = 1.1;        // s: P(index i) ∝ 1 / (i + 1)^s; 0 = uniform
  std::uint64_t seed = 1;
  ValueKind values = ValueKind::normal;
};

// Throws std::invalid_argument naming the bad field.
void validate(const GeneratorOptions& options);

// The gradient of worker `rank`: nnz distinct indices drawn without replacement with Zipf weights
// (i+1)^-s, deterministic in (seed, rank). Successive sampling (i.i.d. Zipf draws by
// rejection-inversion, duplicates dropped) where that needs fewer than M/4 draws in expectation:
// O(nnz) time and memory whatever M; otherwise Efraimidis-Spirakis keys log(u_i)·(i+1)^s streamed
// through an nnz-sized heap: O(M log nnz) time, O(nnz) memory. Both draw from the same
// distribution (generator version 2; version 1 always used the keys, with M·16 bytes of scratch).
template <class Index>
SparseGradient<Index> generate_gradient(const GeneratorOptions& options, int rank);

namespace detail {
// The two samplers generate_gradient chooses between (for tests): nnz < M distinct sorted indices
// in [0, M), Zipf exponent s, from a splitmix64 stream seeded with `seed`.
template <class Index>
std::vector<Index> sample_successive(std::uint64_t M, std::uint64_t nnz, double s,
                                     std::uint64_t seed);
template <class Index>
std::vector<Index> sample_keys(std::uint64_t M, std::uint64_t nnz, double s, std::uint64_t seed);
}  // namespace detail

}  // namespace atl::sparse
