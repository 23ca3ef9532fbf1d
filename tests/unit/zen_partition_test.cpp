#include "atoll/sync/zen_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "atoll/sparse/generator.h"
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
  const HashLayout layout(g.elements, n, 42);
  HashPartition<std::uint32_t> part;
  zen_partition(g, layout, part);
  ASSERT_EQ(part.entries.size(), g.nnz());
  std::size_t at = 0;
  std::vector<std::pair<std::uint32_t, float>> seen;
  for (std::uint32_t j = 0; j < n; ++j) {
    for (std::size_t k = 0; k < part.counts[j]; ++k, ++at) {
      const auto& e = part.entries[at];
      EXPECT_EQ(zen_owner(e.index, n, 42), j);
      if (k) {
        EXPECT_LT(part.entries[at - 1].index, e.index);  // stable: sorted within a block
      }
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
  std::printf("push imbalance over %u servers, %zu non-zeros: %.4f\n", n, g.nnz(), mx / mean);
}

TEST(ZenPartition, IndexZeroAndLastAreOrdinaryEntries) {
  sparse::SparseGradient<std::uint64_t> g{1000, {0, 999}, {3.0f, 4.0f}};
  HashPartition<std::uint64_t> part;
  zen_partition(g, HashLayout(g.elements, 3, 1), part);
  ASSERT_EQ(part.entries.size(), 2u);
  float sum = 0;
  for (const auto& e : part.entries) sum += e.value;
  EXPECT_EQ(sum, 7.0f);
}

// The run-based partition (4-wide stores that overshoot, then a repair pass) against the plain
// definition: entries grouped by zen_owner in server order, stable within a server.
template <class Index>
void expect_partition_matches_reference(const SparseGradient<Index>& g, std::uint32_t n,
                                        const std::string& label) {
  const HashLayout layout(g.elements, n, 5);
  HashPartition<Index> part;
  part.entries.resize(3);  // a reused, dirty buffer of the wrong size
  for (int call = 0; call < 2; ++call) {
    zen_partition(g, layout, part);
    std::vector<std::vector<sparse::Entry<Index>>> by_server(n);
    for (std::size_t k = 0; k < g.nnz(); ++k)
      by_server[zen_owner(g.indices[k], n, 5)].push_back({g.indices[k], g.values[k]});
    std::vector<std::size_t> counts(n, 0);
    std::vector<sparse::Entry<Index>> want;
    for (std::uint32_t j = 0; j < n; ++j) {
      counts[j] = by_server[j].size();
      want.insert(want.end(), by_server[j].begin(), by_server[j].end());
    }
    ASSERT_EQ(part.counts, counts) << label;
    ASSERT_EQ(part.entries.size(), want.size()) << label;
    for (std::size_t k = 0; k < want.size(); ++k) {
      ASSERT_EQ(part.entries[k].index, want[k].index) << label << " entry " << k;
      ASSERT_EQ(part.entries[k].value, want[k].value) << label << " entry " << k;
    }
  }
}

TEST(ZenPartition, MatchesTheDefinitionOnEdgeCases) {
  for (std::uint64_t M : {std::uint64_t{4096}, std::uint64_t{4000}, std::uint64_t{1000003}}) {
    for (std::uint32_t n : {1u, 3u, 16u, 300u}) {
      const std::string at = "M=" + std::to_string(M) + " n=" + std::to_string(n);
      auto make = [&](std::vector<std::uint32_t> idx) {
        SparseGradient<std::uint32_t> g;
        g.elements = M;
        g.indices = std::move(idx);
        for (std::size_t k = 0; k < g.indices.size(); ++k) g.values.push_back(float(k + 1));
        return g;
      };
      const auto last = static_cast<std::uint32_t>(M - 1);
      expect_partition_matches_reference(make({}), n, at + " empty");
      expect_partition_matches_reference(make({0}), n, at + " {0}");
      expect_partition_matches_reference(make({last}), n, at + " {M-1}");
      expect_partition_matches_reference(make({0, last}), n, at + " {0, M-1}");
      for (std::uint32_t size = 1; size <= 40; ++size) {  // the top of the range, every length
        std::vector<std::uint32_t> idx;
        for (std::uint32_t k = size; k > 0; --k) idx.push_back(last - (k - 1));
        expect_partition_matches_reference(make(idx), n, at + " top " + std::to_string(size));
      }
      if (M <= 4096) {  // fully dense
        std::vector<std::uint32_t> idx(M);
        for (std::uint32_t k = 0; k < M; ++k) idx[k] = k;
        expect_partition_matches_reference(make(idx), n, at + " dense");
      }
      for (double d : {0.001, 0.05, 0.9}) {
        sparse::GeneratorOptions o{M, d, 1.1, 4, sparse::ValueKind::normal};
        expect_partition_matches_reference(sparse::generate_gradient<std::uint32_t>(o, 1), n,
                                           at + " d=" + std::to_string(d));
        expect_partition_matches_reference(sparse::generate_gradient<std::uint64_t>(o, 1), n,
                                           at + " 64-bit d=" + std::to_string(d));
      }
    }
  }
}

TEST(HashLayout, SlotsPartitionTheRangeAndInvert) {
  for (std::uint32_t n : {1u, 3u, 7u, 16u}) {
    const std::uint64_t M = 10007;  // not a multiple of the granule: the last one is partial
    HashLayout layout(M, n, 5);
    std::vector<int> seen(M, 0);
    for (std::uint32_t j = 0; j < n; ++j) {
      std::uint64_t previous = 0;
      for (std::size_t s = 0; s < layout.slot_count(j); ++s) {
        const auto x = layout.index_of(j, s);
        if (s) {
          EXPECT_LT(previous, x) << "slot order must be index order";
        }
        previous = x;
        if (x >= M) continue;  // slots of the partial last granule past M
        EXPECT_EQ(zen_owner(x, n, 5), j);
        EXPECT_EQ(layout.slot(x), s);
        ++seen[x];
      }
    }
    for (std::uint64_t x = 0; x < M; ++x) ASSERT_EQ(seen[x], 1) << "index " << x;
  }
}

TEST(Bitmap, EncodeSetsExactlyTheNonZeroSlots) {
  std::vector<float> slots(130, 0.0f);
  slots[0] = 1;
  slots[63] = 2;
  slots[64] = 3;
  slots[129] = -4;  // last slot, in the tail of the final word
  const auto block = bitmap_encode(slots);
  ASSERT_EQ(block.bitmap.size(), 17u);
  EXPECT_EQ(block.values, (std::vector<float>{1, 2, 3, -4}));
  EXPECT_EQ(block.bitmap[0], 1);
  EXPECT_EQ(block.bitmap[7], 0x80);
  EXPECT_EQ(block.bitmap[8], 1);
  EXPECT_EQ(block.bitmap[16], 0x02);
}

// Encode on every server, decode on a receiver: the result is the exact sum, sorted, for both
// block formats (bitmap at high aggregated density, COO at low) and for index 0 and M-1.
TEST(ZenPull, RoundTripMatchesDenseSum) {
  const std::uint64_t M = 100003;
  const std::uint32_t n = 5;
  HashLayout layout(M, n, 9);
  for (double density : {0.0005, 0.3}) {
    std::vector<std::vector<sparse::Entry<std::uint32_t>>> received(n);
    std::vector<double> dense(M, 0.0);
    for (int w = 0; w < 4; ++w) {
      sparse::GeneratorOptions o{M, density, 1.1, 3, sparse::ValueKind::integer};
      auto g = sparse::generate_gradient<std::uint32_t>(o, w);
      g.indices.insert(g.indices.begin(), 0);  // generator may or may not include 0; force it
      g.indices.erase(std::unique(g.indices.begin(), g.indices.end()), g.indices.end());
      if (g.indices.back() != M - 1) g.indices.push_back(M - 1);
      g.values.assign(g.indices.size(), 0.0f);
      for (std::size_t k = 0; k < g.values.size(); ++k) g.values[k] = float(1 + (k + w) % 7);
      for (std::size_t k = 0; k < g.nnz(); ++k) dense[g.indices[k]] += g.values[k];
      HashPartition<std::uint32_t> part;
      zen_partition(g, layout, part);
      std::size_t at = 0;
      for (std::uint32_t j = 0; j < n; ++j) {
        received[j].insert(received[j].end(), part.entries.begin() + at,
                           part.entries.begin() + at + part.counts[j]);
        at += part.counts[j];
      }
    }
    std::vector<std::uint8_t> all;
    std::vector<std::size_t> counts;
    for (std::uint32_t j = 0; j < n; ++j) {
      const auto block = zen_encode_pull_block<std::uint32_t>(layout, j, received[j], true);
      all.insert(all.end(), block.begin(), block.end());
      counts.push_back(block.size());
    }
    SparseGradient<std::uint32_t> out;
    zen_decode_pull<std::uint32_t>(layout, all, counts, out);
    EXPECT_FALSE(out.check().has_value()) << out.check().value_or("");
    const auto got = out.to_dense();
    for (std::uint64_t x = 0; x < M; ++x) ASSERT_EQ(got[x], dense[x]) << "index " << x;
    // A corrupted block is refused, not decoded into a wrong answer.
    counts[0] -= 1;
    EXPECT_THROW(zen_decode_pull<std::uint32_t>(layout, all, counts, out), std::runtime_error);
  }
}

}  // namespace
