// Synthetic sparse gradients with the structure of real embedding gradients: index popularity
// follows a Zipf law over [0, M) with small ids hottest (like a frequency-sorted vocabulary), so
// skew, overlap between workers and densification arise as they do in training.
#pragma once

#include <cstdint>

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
// (Efraimidis–Spirakis: keep the nnz largest keys log(u_i)·(i+1)^s), deterministic in
// (seed, rank). O(M) time and M·8 bytes of scratch.
template <class Index>
SparseGradient<Index> generate_gradient(const GeneratorOptions& options, int rank);

}  // namespace atl::sparse
