// The synthetic generator: both samplers draw the same Zipf-weighted sample without replacement,
// and a gradient costs O(nnz), not O(M).
#include "atoll/sparse/generator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

namespace {

using namespace atl::sparse;

// Inclusion frequency of every index over `trials` samples of `nnz` out of M.
template <class Sampler>
std::vector<double> inclusion(Sampler sample, std::uint64_t M, std::uint64_t nnz, double s,
                              int trials) {
  std::vector<double> freq(M, 0.0);
  for (int t = 0; t < trials; ++t) {
    const auto idx = sample(M, nnz, s, 1000 + t);
    EXPECT_EQ(idx.size(), nnz);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      EXPECT_LT(idx[k], M);
      if (k) EXPECT_LT(idx[k - 1], idx[k]);  // sorted, distinct
      freq[idx[k]] += 1.0 / trials;
    }
  }
  return freq;
}

TEST(Generator, SingleDrawFollowsZipf) {
  const std::uint64_t M = 20;
  const int trials = 40000;
  for (double s : {0.0, 0.7, 1.0, 1.1, 2.5}) {
    const auto f = inclusion(detail::sample_successive<std::uint32_t>, M, 1, s, trials);
    double z = 0;
    for (std::uint64_t i = 0; i < M; ++i) z += std::pow(double(i + 1), -s);
    for (std::uint64_t i = 0; i < M; ++i) {
      const double p = std::pow(double(i + 1), -s) / z;
      EXPECT_NEAR(f[i], p, 5 * std::sqrt(p * (1 - p) / trials) + 1e-4) << "s=" << s << " i=" << i;
    }
  }
}

TEST(Generator, BothSamplersHaveTheSameInclusionProbabilities) {
  const std::uint64_t M = 60;
  const int trials = 20000;
  for (double s : {0.0, 1.1, 2.0}) {
    for (std::uint64_t nnz : {3, 15, 40}) {
      const auto a = inclusion(detail::sample_successive<std::uint32_t>, M, nnz, s, trials);
      const auto b = inclusion(detail::sample_keys<std::uint32_t>, M, nnz, s, trials);
      for (std::uint64_t i = 0; i < M; ++i) {
        const double p = 0.5 * (a[i] + b[i]);
        EXPECT_NEAR(a[i], b[i], 6 * std::sqrt(2 * p * (1 - p) / trials) + 1e-3)
            << "s=" << s << " nnz=" << nnz << " i=" << i;
      }
    }
  }
}

TEST(Generator, CostFollowsNonZerosNotElements) {
  // 2^32 + 1 elements at density 1e-6 (the old generator wanted 68 GB of scratch); 2^60 at 1e-15.
  const auto t0 = std::chrono::steady_clock::now();
  for (auto [M, d] : {std::pair<std::uint64_t, double>{(std::uint64_t{1} << 32) + 1, 1e-6},
                      {std::uint64_t{1} << 60, 1e-15}}) {
    GeneratorOptions o{M, d, 1.1, 7, ValueKind::integer};
    const auto g = generate_gradient<std::uint64_t>(o, 3);
    EXPECT_EQ(g.nnz(), static_cast<std::uint64_t>(std::llround(d * double(M))));
    EXPECT_FALSE(g.check().has_value()) << g.check().value_or("");
    EXPECT_LT(g.indices.back(), M);
  }
  // Not a speed target: a guard that the O(M) path was not taken (it would take minutes).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(Generator, DeterministicPerRankAndEdgeDensities) {
  GeneratorOptions o{1000, 0.05, 1.1, 9, ValueKind::normal};
  EXPECT_EQ(generate_gradient<std::uint32_t>(o, 2).indices,
            generate_gradient<std::uint32_t>(o, 2).indices);
  EXPECT_NE(generate_gradient<std::uint32_t>(o, 2).indices,
            generate_gradient<std::uint32_t>(o, 3).indices);
  for (double d : {0.0, 0.3, 0.9, 1.0}) {  // 0.3 and 0.9: the key sampler; 1.0: every index
    o.density = d;
    const auto g = generate_gradient<std::uint32_t>(o, 0);
    EXPECT_EQ(g.nnz(), static_cast<std::uint64_t>(std::llround(d * 1000)));
    EXPECT_FALSE(g.check().has_value());
  }
  o.elements = 1;
  o.density = 1.0;
  EXPECT_EQ(generate_gradient<std::uint32_t>(o, 0).indices, std::vector<std::uint32_t>{0});
}

}  // namespace
