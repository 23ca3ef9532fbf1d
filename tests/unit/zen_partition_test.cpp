#include <gtest/gtest.h>

#include <algorithm>

#include "atoll/sparse/generator.h"
#include "atoll/sync/zen_partition.h"
#include "sync/common.h"

namespace {
using namespace atl;
using namespace atl::sync;

TEST(ZenPartition, LosslessAndBalancedOnSkewedGradient) {
  // 160k non-zeros drawn with Zipf 1.1 (hot small ids), 16 servers.
  sparse::GeneratorOptions o{std::uint64_t{1} << 24, 0.01, 1.1, 9, sparse::ValueKind::integer};
  const auto g = sparse::generate_gradient<std::uint32_t>(o, 0);
  ASSERT_GT(g.nnz(), 100000u);
  const std::uint32_t n = 16;
  const auto part = zen_partition(g, n, 42);
  ASSERT_EQ(part.entries.size(), g.nnz());
  std::size_t at = 0;
  std::vector<std::pair<std::uint32_t, float>> seen;
  for (std::uint32_t j = 0; j < n; ++j) {
    for (std::size_t k = 0; k < part.counts[j]; ++k, ++at) {
      const auto& e = part.entries[at];
      EXPECT_EQ(zen_owner(e.index, n, 42), j);
      if (k) EXPECT_LT(part.entries[at - 1].index, e.index);  // stable: sorted within a block
      seen.emplace_back(e.index, e.value);
    }
  }
  std::sort(seen.begin(), seen.end());
  for (std::size_t k = 0; k < g.nnz(); ++k) {
    EXPECT_EQ(seen[k].first, g.indices[k]);
    EXPECT_EQ(seen[k].second, g.values[k]);
  }
  const double mean = static_cast<double>(g.nnz()) / n;
  const auto mx = *std::max_element(part.counts.begin(), part.counts.end());
  EXPECT_LE(mx / mean, 1.1) << "push imbalance " << mx / mean;
}

TEST(ZenPartition, IndexZeroAndLastAreOrdinaryEntries) {
  sparse::SparseGradient<std::uint64_t> g{1000, {0, 999}, {3.0f, 4.0f}};
  const auto part = zen_partition(g, 3, 1);
  ASSERT_EQ(part.entries.size(), 2u);
  float sum = 0;
  for (const auto& e : part.entries) sum += e.value;
  EXPECT_EQ(sum, 7.0f);
}

TEST(HashLayout, MembersPartitionTheRangeAndSlotsInvertThem) {
  for (std::uint32_t n : {1u, 3u, 7u, 16u}) {
    const std::uint64_t M = 10007;
    HashLayout<std::uint32_t> layout(M, n, 5);
    std::uint64_t total = 0;
    for (std::uint32_t j = 0; j < n; ++j) {
      const auto members = layout.members(j);
      total += members.size();
      for (std::size_t s = 0; s < members.size(); ++s) {
        EXPECT_EQ(zen_owner(members[s], n, 5), j);
        EXPECT_EQ(layout.slot(members[s]), s);
        if (s) EXPECT_LT(members[s - 1], members[s]);
      }
    }
    EXPECT_EQ(total, M);
  }
}

TEST(Bitmap, RoundTripRecoversExactlyTheNonZeros) {
  const std::uint64_t M = 5000;
  HashLayout<std::uint32_t> layout(M, 4, 3);
  for (std::uint32_t j = 0; j < 4; ++j) {
    const auto members = layout.members(j);
    std::vector<float> slots(members.size(), 0.0f);
    for (std::size_t s = 0; s < slots.size(); s += 1 + s % 5) slots[s] = float(s) + 0.5f;
    if (!slots.empty()) slots.back() = -2.0f;  // last slot (tail of the final bitmap word)
    const auto block = bitmap_encode(slots);
    EXPECT_EQ(block.bitmap.size(), (members.size() + 7) / 8);
    std::vector<std::uint32_t> idx;
    std::vector<float> val;
    bitmap_decode<std::uint32_t>(block.bitmap, block.values, members, idx, val);
    std::size_t k = 0;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slots[s] == 0.0f) continue;
      ASSERT_LT(k, idx.size());
      EXPECT_EQ(idx[k], members[s]);
      EXPECT_EQ(val[k], slots[s]);
      ++k;
    }
    EXPECT_EQ(k, idx.size());
  }
}

TEST(Bitmap, DecodeRejectsMismatchedValueCount) {
  const std::vector<float> slots{1, 0, 2};
  auto block = bitmap_encode(slots);
  block.values.pop_back();
  const std::vector<std::uint32_t> members{4, 8, 9};
  std::vector<std::uint32_t> idx;
  std::vector<float> val;
  EXPECT_THROW(bitmap_decode<std::uint32_t>(block.bitmap, block.values, members, idx, val),
               std::invalid_argument);
}

TEST(SortUniqueByIndex, BothStrategiesSort) {
  for (std::uint64_t M : {std::uint64_t{1} << 20, std::uint64_t{1000}}) {
    std::vector<std::uint32_t> idx;
    std::vector<float> val;
    for (std::uint32_t x = 0; x < 1000; ++x) {
      idx.push_back((x * 7919u) % 1000u);
      val.push_back(float(idx.back()));
    }
    sort_unique_by_index(M, idx, val);
    for (std::uint32_t x = 0; x < 1000; ++x) {
      EXPECT_EQ(idx[x], x);
      EXPECT_EQ(val[x], float(x));
    }
  }
}

}  // namespace
