// The characteristics of sparse gradients that decide which synchronization scheme wins
// (Zen, OSDI'25, §3): density, pairwise overlap, densification γ_n and skewness.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::sparse {

struct Characteristics {
  int workers = 0;
  std::uint64_t elements = 0;
  double density = 0;              // mean over workers of nnz / M
  double overlap = 0;              // mean over pairs of |I_a ∩ I_b| / min(|I_a|, |I_b|)
  double densification = 1;        // γ_n: density of the sum over all workers / density
  std::vector<double> gamma_pow2;  // γ_1, γ_2, γ_4, ... over aligned groups of workers
  double skew = 1;                 // mean over workers: max density of n equal ranges / density
  double first_range_share = 0;    // mean share of non-zeros in the first of n ranges
};

// One gradient per worker, all with the same M (throws InvalidGradient otherwise).
template <class Index>
Characteristics characterize(std::span<const SparseGradient<Index>> workers);

}  // namespace atl::sparse
