// A consumer's fold of a result (entry_fold.h) is the same for every form of the same sum, and
// Zen's pull folded where it arrived (zen_fold.h) agrees with the decoder: the same fold where the
// decoder accepts the blocks, a refusal naming the server where it refuses them.
#include "sync/zen_fold.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "atoll/sync/entry_fold.h"
#include "atoll/sync/zen_partition.h"

namespace {
using namespace atl::sync;
using atl::sparse::SparseGradient;
using E32 = atl::sparse::Entry<std::uint32_t>;

EntryFold reference_fold(const std::vector<std::uint64_t>& idx, const std::vector<float>& val) {
  EntryFold f;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    std::uint32_t b;
    std::memcpy(&b, &val[k], 4);
    if ((b & 0x7FFFFFFFu) == 0) continue;
    f.sum += ((idx[k] ^ b) & 0xFFFFFFFFu) * ((idx[k] | 1) & 0xFFFFFFFFu);
    ++f.count;
  }
  return f;
}

// Sorted COO, dense and rows of the same values fold alike, at every length around the 16-lane
// rounds (0 to 40), with index 0 and M - 1, ±0 values skipped.
TEST(EntryFold, EveryFormOfTheSameSumFoldsAlike) {
  std::mt19937 rng(5);
  for (std::size_t M = 1; M <= 40; ++M) {
    std::vector<float> dense(M);
    for (auto& v : dense) {
      const int r = static_cast<int>(rng() % 5);
      v = r == 0 ? 0.0f : r == 1 ? -0.0f : static_cast<float>(static_cast<int>(rng() % 200) - 100);
    }
    dense[0] = 3.0f;
    dense[M - 1] = -7.0f;
    std::vector<std::uint64_t> idx64;
    std::vector<std::uint32_t> idx32;
    std::vector<float> val;
    for (std::size_t i = 0; i < M; ++i)
      if (dense[i] != 0.0f || std::signbit(dense[i]) || rng() % 4 == 0) {  // some zeros stored
        idx64.push_back(i), idx32.push_back(static_cast<std::uint32_t>(i)), val.push_back(dense[i]);
      }
    const EntryFold want = reference_fold(idx64, val);
    EXPECT_EQ(fold_entries(idx32.data(), val.data(), val.size()), want) << M;
    EXPECT_EQ(fold_entries(idx64.data(), val.data(), val.size()), want) << M;
    EXPECT_EQ(fold_dense(dense.data(), M, 0), want) << M;
    SyncResult<std::uint32_t> coo, as_dense;
    coo.sparse.elements = M;
    coo.sparse.indices = idx32;
    coo.sparse.values = val;
    as_dense.dense_form = true;
    as_dense.dense = dense;
    EXPECT_EQ(fold_result(coo), want) << M;
    EXPECT_EQ(fold_result(as_dense), want) << M;
    if (M % 4 == 0) {  // rows of 4: every row stored, in views too
      SyncResult<std::uint32_t> rows, views;
      rows.sparse.elements = views.sparse.elements = M;
      rows.sparse.width = views.sparse.width = 4;
      for (std::uint32_t r = 0; r < M / 4; ++r) {
        rows.sparse.indices.push_back(r);
        views.sparse.indices.push_back(r);
        views.views.push_back(dense.data() + 4 * r);
      }
      rows.sparse.values = dense;
      EXPECT_EQ(fold_result(rows), want) << M;
      EXPECT_EQ(fold_result(views), want) << M;
    }
  }
  EXPECT_EQ(fold_dense(nullptr, 0, 0), EntryFold{});
}

// Three servers' blocks of a Zipf-like draw over M (not a multiple of 64), each bitmap or COO.
struct Blocks {
  std::vector<std::uint8_t> all;
  std::vector<std::size_t> counts;
};
Blocks encode(const HashLayout& layout, std::vector<std::vector<E32>> per_server,
              const std::vector<PullCoding>& coding) {
  Blocks b;
  for (std::uint32_t j = 0; j < layout.servers(); ++j) {
    const auto block = zen_encode_pull_block<std::uint32_t>(layout, j, per_server[j], coding[j]);
    b.all.insert(b.all.end(), block.begin(), block.end());
    b.counts.push_back(block.size());
  }
  return b;
}

// Decodes and folds the same blocks: both accept (with the same fold) or both refuse.
void expect_agreement(const HashLayout& layout, const Blocks& b, const std::string& label) {
  const std::uint64_t granules = (layout.elements() + 63) / 64;
  SparseGradient<std::uint32_t> decoded;
  bool decode_ok = true;
  try {
    zen_decode_pull<std::uint32_t>(layout, b.all, b.counts, decoded);
  } catch (const std::runtime_error&) {
    decode_ok = false;
  }
  try {
    const EntryFold f = zen_fold_pull_chunk<std::uint32_t>(layout, 0, granules, b.all, b.counts);
    EXPECT_TRUE(decode_ok) << label << ": the fold accepted what the decoder refuses";
    if (decode_ok) {
      EXPECT_EQ(f, fold_entries(decoded.indices.data(), decoded.values.data(), decoded.nnz()))
          << label;
    }
  } catch (const MalformedMessage& e) {
    EXPECT_FALSE(decode_ok) << label << ": the fold refused what the decoder accepts: " << e.what();
    EXPECT_NE(std::string(e.what()).find("server"), std::string::npos) << e.what();
  }
}

// M: the last granule partial, in an even and an odd number of granules (the wide COO fold reads
// the owner table in pairs).
class ZenPullFoldFlips : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(ZenPullFoldFlips, AgreesWithTheDecoderOnEveryBitFlip) {
  const std::uint64_t M = GetParam();
  const HashLayout layout(M, 3, 9);
  std::mt19937 rng(3);
  std::vector<std::vector<E32>> per_server(3);
  for (std::uint32_t x = 0; x < M; ++x)
    if (x < 200 || rng() % 13 == 0 || x == M - 1)
      per_server[layout.owner_table()[x / 64]].push_back({x, static_cast<float>(x % 7) - 3.0f});
  for (const auto& coding :
       {std::vector<PullCoding>{PullCoding::bitmap_or_coo, PullCoding::coo, PullCoding::coo},
        std::vector<PullCoding>{PullCoding::coo, PullCoding::bitmap_or_coo,
                                PullCoding::elias_fano_complement},
        std::vector<PullCoding>{PullCoding::elias_fano, PullCoding::elias_fano,
                                PullCoding::bitmap_or_coo}}) {
    const Blocks clean = encode(layout, per_server, coding);
    expect_agreement(layout, clean, "clean");
    // Every bit of every block's header count and keys (values cannot be wrong, only different).
    std::size_t at = 0;
    for (std::uint32_t j = 0; j < 3; ++j) {
      std::uint64_t nnz;
      std::memcpy(&nnz, clean.all.data() + at + 1, 8);
      const std::size_t keys_end = clean.counts[j] - nnz * sizeof(float);
      for (std::size_t byte = 1; byte < keys_end; ++byte) {
        if (byte >= 3 && byte < 9) continue;  // the count's high bytes: refused as too short
        for (int bit = 0; bit < 8; ++bit) {
          Blocks bad = clean;
          bad.all[at + byte] ^= static_cast<std::uint8_t>(1u << bit);
          expect_agreement(layout, bad,
                           "server " + std::to_string(j) + " byte " + std::to_string(byte) +
                               " bit " + std::to_string(bit));
        }
      }
      at += clean.counts[j];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ZenPullFoldFlips, ::testing::Values(4000 + 37, 2990));

// A COO index past M inside the last granule (M = 4037: granule 63 covers 4032..4095) is refused
// by the decoder and by the fold alike, naming the server (the decoder accepted it before).
TEST(ZenPullFold, CooIndexPastMInTheLastGranuleIsRefused) {
  const std::uint64_t M = 4037;
  const HashLayout layout(M, 3, 9);
  const std::uint32_t j = layout.owner_table()[63];
  std::vector<std::vector<E32>> per_server(3);
  per_server[j] = {{4000, 1.0f}, {static_cast<std::uint32_t>(M - 1), 2.0f}};
  const std::vector<PullCoding> coo(3, PullCoding::coo);
  Blocks b = encode(layout, per_server, coo);
  std::size_t at = 0;
  for (std::uint32_t k = 0; k < j; ++k) at += b.counts[k];
  const std::uint32_t past = static_cast<std::uint32_t>(M);  // the second index, now M
  std::memcpy(b.all.data() + at + 9 + 4, &past, 4);
  SparseGradient<std::uint32_t> out;
  const std::string server = "server " + std::to_string(j);
  for (const bool fold : {false, true}) {
    try {
      if (fold)
        (void)zen_fold_pull_chunk<std::uint32_t>(layout, 0, 64, b.all, b.counts);
      else
        zen_decode_pull<std::uint32_t>(layout, b.all, b.counts, out);
      ADD_FAILURE() << (fold ? "fold" : "decode") << " accepted index M";
    } catch (const MalformedMessage& e) {
      EXPECT_NE(std::string(e.what()).find(server), std::string::npos) << e.what();
    }
  }
}

// The same past the end in a block of 32 entries, where the wide fold reads sixteen at a time:
// the last index moved to M (its granule still the server's) or far past the owner table.
TEST(ZenPullFold, CooIndexPastMInAFullVectorIsRefused) {
  const std::uint64_t M = 4037;
  const HashLayout layout(M, 3, 9);
  const std::uint32_t j = layout.owner_table()[63];
  std::vector<E32> mine;
  for (std::uint32_t x = 0; x < M; ++x)
    if (layout.owner_table()[x / 64] == j) mine.push_back({x, 1.0f + static_cast<float>(x % 5)});
  ASSERT_GE(mine.size(), 32u);
  std::vector<std::vector<E32>> per_server(3);
  per_server[j].assign(mine.end() - 32, mine.end());
  const std::vector<PullCoding> coo(3, PullCoding::coo);
  const Blocks clean = encode(layout, per_server, coo);
  std::size_t at = 0;
  for (std::uint32_t k = 0; k < j; ++k) at += clean.counts[k];
  const std::string server = "server " + std::to_string(j);
  EXPECT_NO_THROW((void)zen_fold_pull_chunk<std::uint32_t>(layout, 0, 64, clean.all, clean.counts));
  for (const std::uint32_t past : {static_cast<std::uint32_t>(M), 0x7FFFFFF0u}) {
    Blocks b = clean;
    std::memcpy(b.all.data() + at + 9 + 31 * 4, &past, 4);
    try {
      (void)zen_fold_pull_chunk<std::uint32_t>(layout, 0, 64, b.all, b.counts);
      ADD_FAILURE() << "fold accepted index " << past;
    } catch (const MalformedMessage& e) {
      EXPECT_NE(std::string(e.what()).find(server), std::string::npos) << e.what();
    }
  }
}

}  // namespace
