#include "atoll/sparse/sparse_gradient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "atoll/sparse/characteristics.h"
#include "atoll/sparse/generator.h"

namespace {
using namespace atl::sparse;

TEST(SparseGradient, ValidationNamesTheProblem) {
  SparseGradient<std::uint32_t> g{10, {1, 3, 3}, {1, 1, 1}};
  ASSERT_TRUE(g.check().has_value());
  EXPECT_NE(g.check()->find("sorted and unique"), std::string::npos);
  g.indices = {1, 10};
  g.values = {1, 1};
  EXPECT_NE(g.check()->find("out of range"), std::string::npos);
  g.indices = {0, 9};
  EXPECT_FALSE(g.check().has_value());
  g.values = {1};
  EXPECT_THROW(g.validate(), InvalidGradient);
}

// check() compares indices in blocks of 64 first: a problem at any position, inside a block, at
// its edges or in the tail, is found and named.
TEST(SparseGradient, ValidationFindsAProblemAtEveryPosition) {
  for (const std::size_t n : {1u, 2u, 63u, 64u, 65u, 129u, 200u}) {
    SparseGradient<std::uint32_t> good{4 * n, {}, std::vector<float>(n, 1.0f)};
    for (std::size_t i = 0; i < n; ++i)
      good.indices.push_back(static_cast<std::uint32_t>(3 * i + 2));
    ASSERT_FALSE(good.check().has_value()) << n;
    for (std::size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << n << " indices, problem at " << i);
      auto g = good;
      g.indices[i] = static_cast<std::uint32_t>(4 * n);  // out of range (and above its successor)
      ASSERT_TRUE(g.check().has_value());
      EXPECT_NE(g.check()->find("at position " + std::to_string(i)), std::string::npos)
          << *g.check();
      if (i == 0) continue;
      g = good;
      g.indices[i] = g.indices[i - 1];  // repeated
      ASSERT_TRUE(g.check().has_value());
      EXPECT_NE(g.check()->find("sorted and unique: index"), std::string::npos) << *g.check();
      EXPECT_NE(g.check()->find("at position " + std::to_string(i)), std::string::npos)
          << *g.check();
    }
  }
  // Index 0 and M - 1 are valid.
  SparseGradient<std::uint64_t> edges{70, {}, std::vector<float>(70, 1.0f)};
  for (std::uint64_t x = 0; x < 70; ++x) edges.indices.push_back(x);
  EXPECT_FALSE(edges.check().has_value());
}

TEST(SparseGradient, DenseRoundTripKeepsIndexZeroAndLast) {
  SparseGradient<std::uint64_t> g{5, {0, 4}, {2.5f, -1.0f}};
  const auto d = g.to_dense();
  EXPECT_EQ(d, (std::vector<float>{2.5f, 0, 0, 0, -1.0f}));
  const auto back = SparseGradient<std::uint64_t>::from_dense(d);
  EXPECT_EQ(back.indices, g.indices);
  EXPECT_EQ(back.values, g.values);
}

TEST(Generator, RespectsDensityAndIsDeterministic) {
  GeneratorOptions o{100000, 0.01, 1.1, 3, ValueKind::integer};
  const auto a = generate_gradient<std::uint32_t>(o, 2);
  const auto b = generate_gradient<std::uint32_t>(o, 2);
  const auto c = generate_gradient<std::uint32_t>(o, 3);
  EXPECT_EQ(a.nnz(), 1000u);
  EXPECT_FALSE(a.check().has_value());
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_NE(a.indices, c.indices);
  for (float v : a.values) EXPECT_EQ(v, std::round(v));
  EXPECT_EQ(generate_gradient<std::uint32_t>({10, 1.0, 1.1, 1, ValueKind::normal}, 0).nnz(), 10u);
  EXPECT_EQ(generate_gradient<std::uint32_t>({10, 0.0, 1.1, 1, ValueKind::normal}, 0).nnz(), 0u);
}

TEST(Generator, RejectsBadOptions) {
  EXPECT_THROW(validate(GeneratorOptions{0, 0.1, 1.1, 1, ValueKind::normal}),
               std::invalid_argument);
  EXPECT_THROW(validate(GeneratorOptions{10, 2.0, 1.1, 1, ValueKind::normal}),
               std::invalid_argument);
  EXPECT_THROW(validate(GeneratorOptions{10, -0.1, 1.1, 1, ValueKind::normal}),
               std::invalid_argument);
}

TEST(Characteristics, ZipfGradientsAreSkewedOverlappingAndDensify) {
  GeneratorOptions o{1 << 20, 0.01, 1.1, 1, ValueKind::normal};
  std::vector<SparseGradient<std::uint32_t>> w;
  for (int r = 0; r < 8; ++r) w.push_back(generate_gradient<std::uint32_t>(o, r));
  const auto c = characterize<std::uint32_t>(w);
  EXPECT_NEAR(c.density, 0.01, 1e-6);
  EXPECT_GT(c.overlap, 0.05);  // paper: usually well above 0.05
  EXPECT_GT(c.densification, 1.0);
  EXPECT_LT(c.densification, 8.0);      // γ_n < n
  EXPECT_GT(c.first_range_share, 0.6);  // paper: > 60% in the first of 8 ranges
  EXPECT_GT(c.skew, 4.0);
  ASSERT_EQ(c.gamma_pow2.size(), 4u);
  EXPECT_DOUBLE_EQ(c.gamma_pow2[0], 1.0);
  EXPECT_NEAR(c.gamma_pow2[3], c.densification, 1e-12);
}

TEST(Characteristics, HandComputedCase) {
  // I1 = {0,1,2,3}, I2 = {2,3}: overlap 2/2 = 1, union 4, mean nnz 3 -> γ_2 = 4/3.
  std::vector<SparseGradient<std::uint32_t>> w{{8, {0, 1, 2, 3}, {1, 1, 1, 1}},
                                               {8, {2, 3}, {1, 1}}};
  const auto c = characterize<std::uint32_t>(w);
  EXPECT_DOUBLE_EQ(c.overlap, 1.0);
  EXPECT_DOUBLE_EQ(c.densification, 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(c.density, 3.0 / 8.0);
  // Both workers have all non-zeros in the first of 2 ranges: skew = 2.
  EXPECT_DOUBLE_EQ(c.skew, 2.0);
}

}  // namespace
