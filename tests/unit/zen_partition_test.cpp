#include "atoll/sync/zen_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <exception>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "atoll/sparse/generator.h"
#include "sync/common.h"

namespace {
using namespace atl;
using namespace atl::sync;

// The push as the servers see it: each server's block of a worker's partition is appended to
// what that server received.
template <class Index>
void deliver(const HashPartition<Index>& part,
             std::vector<std::vector<sparse::Entry<Index>>>& received) {
  std::size_t at = 0;
  for (std::size_t j = 0; j < received.size(); ++j) {
    received[j].insert(received[j].end(), part.entries.begin() + at,
                       part.entries.begin() + at + part.counts[j]);
    at += part.counts[j];
  }
}

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
      {  // repeated indices (refused by the input check): a granule's run of 600 entries
        std::vector<std::uint32_t> idx(600, 5);
        idx.insert(idx.end(), {70, 70, last});
        expect_partition_matches_reference(make(idx), n, at + " repeated");
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

// zen_ef's choice per block is the smallest code, of four: bitmap at mid density, Elias-Fano of the
// non-zero slots when sparse (smaller than indices even for one), of the empty slots when dense
// (where a bitmap spends 1 bit per slot against an entropy of H(0.99) = 0.08); an empty block ties
// at 0 bytes and takes indices.
TEST(ZenPull, SmallestCodingPerDensity) {
  const std::size_t slots = 64 * 1000;
  EXPECT_EQ(zen_pull_format(slots, 0, 4, PullCoding::smallest), 0);  // indices
  EXPECT_EQ(zen_pull_format(slots, 1, 4, PullCoding::smallest), 2);
  EXPECT_EQ(zen_pull_format(slots, slots / 50, 4, PullCoding::smallest), 2);        // Elias-Fano
  EXPECT_EQ(zen_pull_format(slots, slots / 2, 4, PullCoding::smallest), 1);         // bitmap
  EXPECT_EQ(zen_pull_format(slots, slots * 99 / 100, 4, PullCoding::smallest), 3);  // of empties
  EXPECT_EQ(zen_pull_format(slots, slots, 4, PullCoding::smallest), 3);  // full: no code at all
  EXPECT_EQ(zen_pull_key_bytes(slots, slots, 4, PullCoding::smallest), 0u);
  EXPECT_LT(zen_pull_key_bytes(slots, slots * 99 / 100, 4, PullCoding::smallest), slots / 8 / 4);
  // bitmap_or_coo (zen) never takes either Elias-Fano code, and takes indices only where they
  // are at most a quarter of the bitmap (slots / 8 bytes): 4-byte indices below 1/128 density.
  EXPECT_EQ(zen_pull_format(slots, slots * 99 / 100, 4, PullCoding::bitmap_or_coo), 1);
  EXPECT_EQ(zen_pull_format(slots, slots / 64, 4, PullCoding::bitmap_or_coo), 1);   // indices 1/2
  EXPECT_EQ(zen_pull_format(slots, slots / 128, 4, PullCoding::bitmap_or_coo), 0);  // 1/4
  EXPECT_EQ(zen_pull_format(slots, slots / 1000, 4, PullCoding::bitmap_or_coo), 0);
  EXPECT_EQ(zen_pull_format(slots, 0, 4, PullCoding::bitmap_or_coo), 0);
  // bitmap_or_coo_smaller (zen folding in place): indices wherever they are not larger, 4-byte
  // ones up to 1/32 density (a tie there takes indices), and 8-byte ones up to 1/64.
  EXPECT_EQ(zen_pull_format(slots, slots / 64, 4, PullCoding::bitmap_or_coo_smaller), 0);
  EXPECT_EQ(zen_pull_format(slots, slots / 32, 4, PullCoding::bitmap_or_coo_smaller), 0);
  EXPECT_EQ(zen_pull_format(slots, slots / 16, 4, PullCoding::bitmap_or_coo_smaller), 1);
  EXPECT_EQ(zen_pull_format(slots, slots / 32, 8, PullCoding::bitmap_or_coo_smaller), 1);
  EXPECT_EQ(zen_pull_format(slots, 0, 4, PullCoding::bitmap_or_coo_smaller), 0);
  EXPECT_EQ(zen_pull_format(slots, slots, 4, PullCoding::bitmap_or_coo_smaller), 1);
}

constexpr PullCoding kCodings[] = {PullCoding::coo, PullCoding::bitmap_or_coo, PullCoding::smallest,
                                   PullCoding::elias_fano, PullCoding::elias_fano_complement};

// Encode on every server, decode on a receiver: the result is the exact sum, sorted, for every
// coding (bitmap at high aggregated density, COO at low, Elias-Fano where smallest or forced), for
// index 0 and M-1, and for a server with nothing (densities 0 and 1 per worker included).
TEST(ZenPull, RoundTripMatchesDenseSum) {
  const std::uint64_t M = 100003;
  const std::uint32_t n = 5;
  HashLayout layout(M, n, 9);
  for (const PullCoding coding : kCodings)
    for (double density : {0.0, 0.0005, 0.05, 0.3, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "coding " << int(coding) << ", density " << density);
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
        deliver(part, received);
      }
      std::vector<std::uint8_t> all;
      std::vector<std::size_t> counts;
      for (std::uint32_t j = 0; j < n; ++j) {
        const auto block = zen_encode_pull_block<std::uint32_t>(layout, j, received[j], coding);
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

namespace {
using atl::sync::HashLayout;

// Every server's received entries for `workers` Zipf gradients (integer values: exact sums).
// Every worker's push delivered; counts[j][w]: the entries server j received from worker w.
std::vector<std::vector<sparse::Entry<std::uint32_t>>> push_all(
    const HashLayout& layout, double density, int workers, std::vector<double>& dense,
    std::vector<std::vector<std::size_t>>* counts = nullptr,
    sparse::ValueKind values = sparse::ValueKind::integer) {
  const std::uint32_t n = layout.servers();
  std::vector<std::vector<sparse::Entry<std::uint32_t>>> received(n);
  dense.assign(layout.elements(), 0.0);
  if (counts) counts->assign(n, {});
  for (int w = 0; w < workers; ++w) {
    sparse::GeneratorOptions o{layout.elements(), density, 1.1, 3, values};
    const auto g = sparse::generate_gradient<std::uint32_t>(o, w);
    for (std::size_t k = 0; k < g.nnz(); ++k) dense[g.indices[k]] += g.values[k];
    HashPartition<std::uint32_t> part;
    zen_partition(g, layout, part);
    deliver(part, received);
    for (std::uint32_t j = 0; counts && j < n; ++j) (*counts)[j].push_back(part.counts[j]);
  }
  return received;
}

// Tasks on 4 threads (task t on thread t % 4): the parts really run concurrently.
const ParallelTasks on_threads = [](std::size_t tasks,
                                    const std::function<void(std::size_t)>& task) {
  const std::size_t T = std::min<std::size_t>(tasks, 4);
  std::vector<std::exception_ptr> failures(T);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < T; ++i) {
    threads.emplace_back([&, i] {
      try {
        for (std::size_t t = i; t < tasks; t += T) task(t);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& f : failures)
    if (f) std::rethrow_exception(f);
};
}  // namespace

TEST(ZenPull, ChunkedRoundTripWithBalancedBounds) {
  const std::uint64_t M = 1000003;  // not a multiple of 64
  const std::uint32_t n = 5;
  const HashLayout layout(M, n, 9);
  const std::uint64_t granules = (M + 63) / 64;
  for (const PullCoding coding : kCodings)
    for (double density : {0.0005, 0.01, 0.3}) {
      SCOPED_TRACE(::testing::Message() << "coding " << int(coding) << ", density " << density);
      std::vector<double> dense;
      auto received = push_all(layout, density, 4, dense);
      const auto buckets = zen_granule_bounds(M, zen_pull_buckets(M));
      const std::size_t H = buckets.size() - 1;
      std::vector<ZenServerSums<std::uint32_t>> sums(n);
      std::vector<std::uint64_t> bucket_nnz;
      for (std::uint32_t j = 0; j < n; ++j) {
        zen_aggregate(layout, j, received[j], buckets, sums[j]);
        ASSERT_EQ(sums[j].bucket_nnz.size(), H);
        bucket_nnz.insert(bucket_nnz.end(), sums[j].bucket_nnz.begin(), sums[j].bucket_nnz.end());
      }
      const auto bounds = zen_balanced_chunks(layout, buckets, bucket_nnz, 8);
      ASSERT_GE(bounds.size(), 3u) << "a skewed gradient over 244 buckets splits";
      ASSERT_LE(bounds.size(), 9u);
      EXPECT_EQ(bounds.front(), 0u);
      EXPECT_EQ(bounds.back(), granules);
      for (std::size_t p = 1; p < bounds.size(); ++p) EXPECT_LT(bounds[p - 1], bounds[p]);

      std::vector<std::vector<std::uint8_t>> chunk_blocks(bounds.size() - 1);
      std::vector<std::vector<std::size_t>> chunk_counts(bounds.size() - 1);
      for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
        for (std::uint32_t j = 0; j < n; ++j) {
          const std::size_t s0 = layout.granules_before(j, bounds[p]) * 64;
          const std::size_t s1 = layout.granules_before(j, bounds[p + 1]) * 64;
          std::vector<std::uint8_t> block;
          const auto bytes = zen_encode_pull_chunk(layout, j, sums[j], s0, s1, coding, block);
          for (const unsigned parts : {2u, 3u, 1000u}) {  // the same bytes, gathered in parts
            std::vector<std::uint8_t> split;
            zen_encode_pull_chunk(layout, j, sums[j], s0, s1, coding, split, parts, on_threads);
            ASSERT_EQ(split, block) << parts << " parts";
          }
          const std::uint64_t nnz = sums[j].nnz_before[s1 / 64] - sums[j].nnz_before[s0 / 64];
          ASSERT_EQ(bytes, zen_pull_block_bytes(s1 - s0, nnz, 4, coding)) << "announced size";
          ASSERT_EQ(block.size(), bytes);
          chunk_blocks[p].insert(chunk_blocks[p].end(), block.begin(), block.end());
          chunk_counts[p].push_back(bytes);
        }
      }
      // One part (the serial walk), and split into parts decoded one after another or on threads.
      for (const unsigned parts : {1u, 2u, 3u, 8u, 200u}) {
        for (const bool threaded : {false, true}) {
          if (parts == 1 && threaded) continue;
          SCOPED_TRACE(::testing::Message()
                       << parts << " parts" << (threaded ? " on threads" : ""));
          std::vector<std::uint32_t> idx(static_cast<std::size_t>(M) + kZenDecodeSlack);
          std::vector<float> val(idx.size());
          std::size_t pos = 0;
          for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
            pos += zen_decode_pull_chunk<std::uint32_t>(
                layout, bounds[p], bounds[p + 1], chunk_blocks[p], chunk_counts[p],
                idx.data() + pos, val.data() + pos, static_cast<std::size_t>(M) - pos, {}, parts,
                threaded ? on_threads : ParallelTasks{});
          }
          SparseGradient<std::uint32_t> out;
          out.elements = M;
          out.indices.assign(idx.begin(), idx.begin() + pos);
          out.values.assign(val.begin(), val.begin() + pos);
          EXPECT_FALSE(out.check().has_value()) << out.check().value_or("");
          const auto got = out.to_dense();
          for (std::uint64_t x = 0; x < M; ++x) ASSERT_EQ(got[x], dense[x]) << "index " << x;
        }
      }
    }
}

TEST(ZenPull, AggregateInPartsEqualsOnePart) {
  const std::uint64_t M = 1000003;  // not a multiple of 64
  const std::uint32_t n = 5;
  const HashLayout layout(M, n, 9);
  const auto buckets = zen_granule_bounds(M, zen_pull_buckets(M));
  // Float values (not integers): a different order of additions would show in the sums' bits.
  for (double density : {0.0005, 0.05, 0.3}) {
    std::vector<double> dense;
    std::vector<std::vector<std::size_t>> counts;
    const auto received = push_all(layout, density, 4, dense, &counts, sparse::ValueKind::normal);
    for (std::uint32_t j = 0; j < n; ++j) {
      auto entries = received[j];
      ZenServerSums<std::uint32_t> one;
      zen_aggregate(layout, j, entries, buckets, one);  // one pass over the entries
      // With the senders' counts: range by range of the slots, each sender's block walked in step.
      for (const unsigned parts : {1u, 2u, 3u, 7u, 100000u})
        for (const bool with_counts : {false, true})
          for (const bool threaded : {false, true}) {
            // More parts than words (one task a word, ~3100 here) on server 0 only: with counts
            // each task zeroes its own 256 KiB scratch range (~800 MB a call), without them it
            // passes over all entries (not at 30% density). The test took 33.5 s on every
            // server, 5.4 s so (2026-12-07); the lower densities take the same paths.
            if (parts > 7 && (j != 0 || (!with_counts && density > 0.1))) continue;
            SCOPED_TRACE(::testing::Message()
                         << "density " << density << ", server " << j << ", " << parts << " parts"
                         << (threaded ? " on threads" : "") << (with_counts ? ", counts" : ""));
            auto copy = received[j];
            ZenServerSums<std::uint32_t> split;
            zen_aggregate(layout, j, copy, buckets, split,
                          with_counts ? std::span<const std::size_t>(counts[j])
                                      : std::span<const std::size_t>{},
                          parts, threaded ? on_threads : ParallelTasks{});
            ASSERT_EQ(split.sparse, one.sparse);
            // Bit for bit: the same additions in the same order.
            EXPECT_TRUE(std::ranges::equal(split.nonzero_values(), one.nonzero_values()));
            EXPECT_EQ(split.idx, one.idx);
            EXPECT_EQ(split.val, one.val);
            EXPECT_EQ(split.words, one.words);
            EXPECT_EQ(split.nnz_before, one.nnz_before);
            EXPECT_EQ(split.bucket_nnz, one.bucket_nnz);
          }
    }
  }
  // Counts that do not add up to the entries are refused before anything is read.
  std::vector<double> dense;
  std::vector<std::vector<std::size_t>> counts;
  auto received = push_all(layout, 0.05, 2, dense, &counts);
  counts[0].back() += 1;
  ZenServerSums<std::uint32_t> sums;
  EXPECT_THROW(
      zen_aggregate(layout, 0, received[0], buckets, sums, std::span<const std::size_t>(counts[0])),
      std::invalid_argument);
}

// The slot-buffer form's scratch range is zero between calls (every range's slots are set back to
// zero as its sums are copied out, and a range where the check stops is zeroed): one sums object
// reused across densities and servers, and after pushes refused in the middle of a range (the
// last sender's entry moved to a granule another server owns, after the other senders' entries
// of that range were added; once in the middle of its block, once at 90%), sums bit for bit
// what the one pass without counts sums. At 3 servers every range looks its words up in a table
// of its own; at 100 servers and M = 2^23 + 5 (1311 granules a server) the first range's span of
// granules is too wide for one and it uses the layout's table, the second its own.
TEST(ZenPull, AggregateReusedAfterARefusedPush) {
  struct Case {
    std::uint64_t M;
    std::uint32_t n;
    std::vector<double> densities;
    std::vector<std::uint32_t> servers;
  };
  for (const Case& t : {Case{1000003, 3, {0.3, 0.05, 0.3}, {0, 1, 2}},
                        Case{(std::uint64_t{1} << 23) + 5, 100, {0.05}, {0, 57, 99}}}) {
    const HashLayout layout(t.M, t.n, 9);
    const auto buckets = zen_granule_bounds(t.M, zen_pull_buckets(t.M));
    const auto owner = layout.owner_table();
    ZenServerSums<std::uint32_t> reused;
    for (double density : t.densities) {
      std::vector<double> dense;
      std::vector<std::vector<std::size_t>> counts;
      const auto received = push_all(layout, density, 4, dense, &counts, sparse::ValueKind::normal);
      for (const std::uint32_t j : t.servers) {
        SCOPED_TRACE(::testing::Message()
                     << "M " << t.M << ", density " << density << ", server " << j);
        const std::span<const std::size_t> c(counts[j]);
        const std::size_t last_begin = received[j].size() - c.back();
        for (const std::size_t from : {last_begin + c.back() / 2, last_begin + c.back() * 9 / 10}) {
          auto bad = received[j];
          bool moved = false;
          for (std::size_t k = from; k + 1 < bad.size() && !moved; ++k) {
            for (std::uint32_t x = bad[k - 1].index + 1; x < bad[k + 1].index && !moved; ++x) {
              if (owner[x / kZenGranule] != j) {
                bad[k].index = x;
                moved = true;
              }
            }
          }
          ASSERT_TRUE(moved);
          EXPECT_THROW(zen_aggregate(layout, j, bad, buckets, reused, c), MalformedMessage);
        }
        auto copy = received[j];
        zen_aggregate(layout, j, copy, buckets, reused, c);
        auto again = received[j];
        ZenServerSums<std::uint32_t> fresh;  // without the counts: one pass into the whole buffer
        zen_aggregate(layout, j, again, buckets, fresh);
        ASSERT_FALSE(fresh.sparse);
        ASSERT_EQ(reused.sparse, fresh.sparse);
        EXPECT_TRUE(std::ranges::equal(reused.nonzero_values(), fresh.nonzero_values()));
        EXPECT_EQ(reused.words, fresh.words);
        EXPECT_EQ(reused.bucket_nnz, fresh.bucket_nnz);
      }
    }
  }
}

// On a network, a block is at least its share of the bandwidth-delay product: a rank receives
// servers - 1 blocks per chunk, each chunk a latency, so no chunk pays more in latency than in
// transfer. A cluster's product is below the configured block; 0 (the most chunks) stays 0.
// The sparse form (fewer entries than a sixteenth of the slots: a sort instead of the slot
// buffer), at M that take one, two and three passes of its radix sort (12 bits of index a
// pass): every index's sum equals the senders' values added in sender order, bit for bit
// (the order the buffer path adds in), with index 0 and M - 1, sums of exactly zero dropped.
TEST(ZenPull, SparseAggregateSumsInSenderOrder) {
  for (const std::uint64_t M :
       {std::uint64_t{1000}, std::uint64_t{1} << 20, (std::uint64_t{1} << 24) + 37}) {
    const std::uint32_t servers = 2, senders = 5;
    const HashLayout layout(M, servers, 11);
    const std::uint32_t server = layout.owner_table()[0];
    std::mt19937_64 rng(M);
    std::normal_distribution<float> value(0.0f, 1.0f);
    // Indices this server owns: a few hot ones every sender has, and scattered ones.
    std::vector<std::uint64_t> mine;
    for (std::uint64_t x = 0; x < M; x += 1 + rng() % 997)
      if (layout.owner_table()[x / 64] == server) mine.push_back(x);
    if (layout.owner_table()[(M - 1) / 64] == server) mine.push_back(M - 1);
    std::vector<sparse::Entry<std::uint32_t>> received;
    std::vector<std::size_t> counts;
    std::map<std::uint64_t, float> want;  // sender by sender, as the buffer path adds
    for (std::uint32_t r = 0; r < senders; ++r) {
      std::size_t c = 0;
      for (std::size_t k = 0; k < mine.size(); ++k) {
        if (k >= 3 && k + 1 < mine.size() && rng() % 3 != 0) continue;
        float v = value(rng);
        if (k == 1) v = r % 2 == 0 ? 1.5f : -1.5f;  // senders 0..3 cancel; sender 4 does not
        if (k == 2 && r == senders - 1) v = -want[mine[2]];  // cancels to exactly zero
        received.push_back({static_cast<std::uint32_t>(mine[k]), v});
        want[mine[k]] += v;
        ++c;
      }
      counts.push_back(c);
    }
    ASSERT_LT(received.size() * 16, layout.slot_count(server)) << "the sparse form";
    const auto buckets = zen_granule_bounds(M, zen_pull_buckets(M));
    for (const bool with_counts : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "M " << M << (with_counts ? ", counts" : ""));
      auto copy = received;
      ZenServerSums<std::uint32_t> sums;
      zen_aggregate(
          layout, server, copy, buckets, sums,
          with_counts ? std::span<const std::size_t>(counts) : std::span<const std::size_t>{});
      ASSERT_TRUE(sums.sparse);
      std::vector<std::uint32_t> idx;
      std::vector<float> val;
      for (const auto& [x, v] : want) {
        if (v == 0.0f) continue;
        idx.push_back(static_cast<std::uint32_t>(x));
        val.push_back(v);
      }
      EXPECT_EQ(sums.idx, idx);
      ASSERT_EQ(sums.val.size(), val.size());
      for (std::size_t k = 0; k < val.size(); ++k)
        EXPECT_EQ(std::bit_cast<std::uint32_t>(sums.val[k]), std::bit_cast<std::uint32_t>(val[k]))
            << "index " << idx[k];
      EXPECT_EQ(sums.nnz_before.back(), idx.size());
    }
  }
}

TEST(ZenPull, MinBlockFromTheBandwidthDelayProduct) {
  EXPECT_EQ(zen_pull_min_block(32768, 4e-6, 25e9 / 8, 16), 32768u);    // 25 Gbit/s, 4 us: 833 B
  EXPECT_EQ(zen_pull_min_block(32768, 0.1, 125e6, 8), 12500000u / 7);  // WAN: 1 Gbit/s, 100 ms
  EXPECT_EQ(zen_pull_min_block(0, 0.1, 125e6, 8), 0u);
  EXPECT_EQ(zen_pull_min_block(32768, 0.1, 125e6, 1), 32768u);
  // A WAN pull of 1 MB from 8 servers then travels in one chunk, not 3.
  EXPECT_EQ(zen_pull_chunks_for(1e6, 8, 8, 32768), 3u);
  EXPECT_EQ(zen_pull_chunks_for(1e6, 8, 8, zen_pull_min_block(32768, 0.1, 125e6, 8)), 1u);
}

// The chunk count keeps the average block at least min_block bytes: 8 bytes of bitmap per granule
// and 4 per non-zero, over servers x chunks blocks.
TEST(ZenPull, ChunkCountFromTheAverageBlock) {
  const std::uint64_t M = 64 * 4096;  // 4096 granules: 32 KiB of bitmap in all
  const HashLayout layout(M, 4, 1);
  const auto buckets = zen_granule_bounds(M, zen_pull_buckets(M));
  const std::size_t H = buckets.size() - 1;
  std::vector<std::uint64_t> nnz(4 * H, 0);
  // Bitmap only: 32 KiB over 4 servers is 8 KiB per server in one chunk.
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 8, 8192), 1u);
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 8, 4096), 2u);
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 8, 100000), 1u);  // never fewer than 1
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 8, 1), 8u);       // never more than 8
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 3, 0), 3u);       // 0: the most
  // 24,576 non-zeros in all add 96 KiB: 128 KiB, 32 KiB per server, 3 chunks of >= 8 KiB blocks
  // would leave 10.7 KiB each, 4 exactly 8 KiB, 5 too small.
  for (std::size_t b = 0; b < H; ++b) nnz[b % 4 * H + b] = 24576 / H;
  nnz[0] += 24576 % H;
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 8, 8192), 4u);
  EXPECT_EQ(zen_pull_chunk_count(layout, buckets, nnz, 8, 8193), 3u);
  // zen_balanced_chunks takes that many (the buckets here are about equal).
  EXPECT_EQ(zen_balanced_chunks(layout, buckets, nnz, 8, 8192).size(), 5u);
  EXPECT_EQ(zen_balanced_chunks(layout, buckets, nnz, 8, 0).size(), 9u);
  EXPECT_THROW(zen_pull_chunk_count(layout, buckets, std::vector<std::uint64_t>(3), 8, 1),
               std::invalid_argument);
  EXPECT_THROW(zen_pull_chunk_count(layout, buckets, nnz, 0, 1), std::invalid_argument);
}

TEST(ZenPull, BalancedChunksOnDegenerateCounts) {
  const HashLayout layout(100000, 4, 1);
  const auto buckets = zen_granule_bounds(100000, zen_pull_buckets(100000));
  const std::size_t H = buckets.size() - 1;
  // All-zero counts: the bitmap bytes alone still split the range.
  const auto even = zen_balanced_chunks(layout, buckets, std::vector<std::uint64_t>(4 * H, 0), 8);
  EXPECT_EQ(even.size(), 9u);
  EXPECT_EQ(even.back(), buckets.back());
  // Everything in the first bucket: it becomes a chunk of its own, the rest shares what is left.
  std::vector<std::uint64_t> head(4 * H, 0);
  for (std::uint32_t j = 0; j < 4; ++j) head[j * H] = 1000000;
  const auto skewed = zen_balanced_chunks(layout, buckets, head, 8);
  ASSERT_GE(skewed.size(), 2u);
  EXPECT_EQ(skewed[1], buckets[1]);
  // One bucket: one chunk. Bad arguments are refused, not read out of bounds.
  const std::vector<std::uint64_t> one{0, buckets.back()};
  EXPECT_EQ(zen_balanced_chunks(layout, one, std::vector<std::uint64_t>(4, 7), 8).size(), 2u);
  EXPECT_THROW(zen_balanced_chunks(layout, buckets, std::vector<std::uint64_t>(3), 8),
               std::invalid_argument);
  EXPECT_THROW(zen_balanced_chunks(layout, buckets, head, 0), std::invalid_argument);
  EXPECT_THROW(zen_granule_bounds(100000, 0), std::invalid_argument);
}

// A long COO block (server 0 of 2: 200 of its indices, 16 at a time where the decoder has
// AVX-512) decodes exactly; a swap, a repeat or an index server 0 does not own, anywhere in it, is
// refused, with either kernel set.
TEST(ZenPull, LongCooBlockCheckedAtEveryEntry) {
  const std::uint64_t M = 100000;
  const HashLayout layout(M, 2, 1);
  std::vector<std::uint32_t> mine, other;
  for (std::uint64_t x = 0; x < M && (mine.size() < 200 || other.empty()); ++x)
    (zen_owner(x, 2, 1) == 0 ? mine : other).push_back(static_cast<std::uint32_t>(x));
  auto decode = [&](const std::vector<std::uint32_t>& idx) {
    std::vector<std::uint8_t> all{0};  // COO
    const std::uint64_t nnz = idx.size();
    all.insert(all.end(), reinterpret_cast<const std::uint8_t*>(&nnz),
               reinterpret_cast<const std::uint8_t*>(&nnz) + 8);
    all.insert(all.end(), reinterpret_cast<const std::uint8_t*>(idx.data()),
               reinterpret_cast<const std::uint8_t*>(idx.data() + idx.size()));
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const float v = static_cast<float>(k + 1);
      all.insert(all.end(), reinterpret_cast<const std::uint8_t*>(&v),
                 reinterpret_cast<const std::uint8_t*>(&v) + 4);
    }
    const std::size_t first = all.size();
    all.insert(all.end(), {0, 0, 0, 0, 0, 0, 0, 0, 0});  // server 1: COO, no entries
    const std::vector<std::size_t> counts{first, all.size() - first};
    SparseGradient<std::uint32_t> out;
    zen_decode_pull<std::uint32_t>(layout, all, counts, out);
    return out;
  };
  const auto out = decode(mine);
  ASSERT_EQ(out.indices, mine);
  for (std::size_t k = 0; k < mine.size(); ++k) EXPECT_EQ(out.values[k], float(k + 1));
  for (const std::size_t at : {0u, 5u, 15u, 16u, 17u, 40u, 63u, 64u, 100u, 150u}) {
    auto swapped = mine;
    std::swap(swapped[at], swapped[at + 1]);
    EXPECT_THROW(decode(swapped), std::runtime_error) << "swap at " << at;
    auto repeated = mine;
    repeated[at + 1] = repeated[at];
    EXPECT_THROW(decode(repeated), std::runtime_error) << "repeat at " << at;
    auto foreign = mine;
    foreign[at] = other[0];  // server 1's index
    std::sort(foreign.begin(), foreign.end());
    EXPECT_THROW(decode(foreign), std::runtime_error) << "foreign index at " << at;
  }
}

TEST(ZenPull, UnsortedCooBlockIsRefused) {
  const std::uint64_t M = 100000;
  const HashLayout layout(M, 2, 1);
  // Server 0's block in COO form with two of its indices swapped.
  std::vector<std::uint32_t> mine;
  for (std::uint64_t x = 0; x < M && mine.size() < 3; ++x)
    if (zen_owner(x, 2, 1) == 0) mine.push_back(static_cast<std::uint32_t>(x));
  std::swap(mine[1], mine[2]);
  std::vector<std::uint8_t> block{0};  // COO
  const std::uint64_t nnz = 3;
  block.insert(block.end(), reinterpret_cast<const std::uint8_t*>(&nnz),
               reinterpret_cast<const std::uint8_t*>(&nnz) + 8);
  block.insert(block.end(), reinterpret_cast<const std::uint8_t*>(mine.data()),
               reinterpret_cast<const std::uint8_t*>(mine.data()) + 12);
  const float values[3] = {1, 2, 3};
  block.insert(block.end(), reinterpret_cast<const std::uint8_t*>(values),
               reinterpret_cast<const std::uint8_t*>(values) + 12);
  std::vector<std::uint8_t> empty{0, 0, 0, 0, 0, 0, 0, 0, 0};  // server 1: COO, no entries
  std::vector<std::uint8_t> all = block;
  all.insert(all.end(), empty.begin(), empty.end());
  const std::vector<std::size_t> counts{block.size(), empty.size()};
  SparseGradient<std::uint32_t> out;
  EXPECT_THROW(zen_decode_pull<std::uint32_t>(layout, all, counts, out), std::runtime_error);
  // Split into parts, serially or on threads, it is refused as well.
  const std::uint64_t granules = (M + 63) / 64;
  for (const unsigned parts : {2u, 3u, 64u})
    for (const bool threaded : {false, true}) {
      std::vector<std::uint32_t> oi2(3 + kZenDecodeSlack);
      std::vector<float> ov2(oi2.size());
      EXPECT_THROW(zen_decode_pull_chunk<std::uint32_t>(layout, 0, granules, all, counts,
                                                        oi2.data(), ov2.data(), 3, {}, parts,
                                                        threaded ? on_threads : ParallelTasks{}),
                   std::runtime_error)
          << parts << " parts";
    }
  // Fewer blocks than servers is refused too.
  std::vector<std::uint32_t> oi(16);
  std::vector<float> ov(16);
  EXPECT_THROW(
      zen_decode_pull_chunk<std::uint32_t>(
          layout, 0, 10, empty, std::vector<std::size_t>{empty.size()}, oi.data(), ov.data(), 8),
      std::runtime_error);
}
