// Zen over rows (include/atoll/sync/zen_rows.h): the building blocks run in one process, n
// "servers" at once, against a dense reference; every pull format; corrupt messages refused; and
// the block form of SparseGradient (width, expand_blocks, group_blocks).
#include "atoll/sync/zen_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "atoll/sparse/generator.h"
#include "atoll/sync/scheme.h"

namespace {
using namespace atl;
using namespace atl::sync;
using sparse::SparseGradient;

template <class Index>
SparseGradient<Index> rows_of(std::uint64_t R, std::uint32_t w, double density, int rank) {
  sparse::GeneratorOptions o{R, density, 1.1, 17, sparse::ValueKind::integer};
  const auto rows = sparse::generate_gradient<Index>(o, rank);
  SparseGradient<Index> g;
  g.elements = R * w;
  g.width = w;
  g.indices = rows.indices;
  for (std::size_t k = 0; k < rows.nnz(); ++k)
    for (std::uint32_t j = 0; j < w; ++j) g.values.push_back(rows.values[k] + float(j % 3));
  return g;
}

// What every server sends in the pull: blocks, their byte counts, rows and codings.
struct Pull {
  std::vector<std::uint8_t> blocks;
  std::vector<std::size_t> counts;
  std::vector<std::uint64_t> rows;
  std::vector<PullCoding> codings;
};

// Partition, push, aggregate and encode of n workers' gradients on n servers.
template <class Index>
Pull push_and_encode(const std::vector<SparseGradient<Index>>& grads, const RowLayout& layout,
                     PullCoding coding) {
  const std::uint32_t n = layout.servers(), w = grads[0].width;
  std::vector<std::vector<std::uint8_t>> received(n);
  std::vector<std::vector<std::size_t>> counts(n, std::vector<std::size_t>(n));
  for (std::uint32_t r = 0; r < n; ++r) {
    RowPartition<Index> part;
    zen_row_partition(grads[r], layout, part);
    std::size_t at = 0;
    for (std::uint32_t j = 0; j < n; ++j) {
      received[j].insert(received[j].end(), part.bytes.begin() + at,
                         part.bytes.begin() + at + part.counts[j]);
      counts[j][r] = part.counts[j];
      at += part.counts[j];
    }
  }
  Pull pull;
  for (std::uint32_t j = 0; j < n; ++j) {
    ZenRowSums sums;
    zen_row_aggregate<Index>(layout, j, w, received[j], counts[j], sums);
    pull.counts.push_back(zen_row_encode<Index>(layout, j, sums, coding, pull.blocks));
    pull.rows.push_back(sums.rows);
    pull.codings.push_back(coding);
  }
  return pull;
}

template <class Index>
void expect_sum(std::uint64_t R, std::uint32_t w, std::uint32_t n, double density,
                PullCoding coding) {
  std::vector<SparseGradient<Index>> grads;
  std::vector<float> ref(R * w, 0.0f);
  for (std::uint32_t r = 0; r < n; ++r) {
    grads.push_back(rows_of<Index>(R, w, density, static_cast<int>(r)));
    const auto d = grads.back().to_dense();
    for (std::size_t i = 0; i < d.size(); ++i) ref[i] += d[i];
  }
  const RowLayout layout(R, n, 7);
  const Pull pull = push_and_encode(grads, layout, coding);
  SparseGradient<Index> out;
  zen_row_decode<Index>(layout, w, pull.blocks, pull.counts, pull.rows, pull.codings, out);
  const std::string label = "R=" + std::to_string(R) + " w=" + std::to_string(w) +
                            " n=" + std::to_string(n) + " d=" + std::to_string(density) +
                            " coding=" + std::to_string(static_cast<int>(coding));
  ASSERT_FALSE(out.check().has_value()) << label << ": " << out.check().value_or("");
  EXPECT_EQ(out.width, w) << label;
  EXPECT_EQ(out.to_dense(), ref) << label;
  // Views (SchemeOptions::row_views): the same rows, each pointing at its values inside the
  // blocks (float storage; every block whole floats, so every row's values 4-byte aligned).
  for (const auto c : pull.counts) EXPECT_EQ(c % sizeof(float), 0u) << label;
  std::vector<float> storage((pull.blocks.size() + 3) / 4);
  std::memcpy(storage.data(), pull.blocks.data(), pull.blocks.size());
  const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(storage.data()),
                                            pull.blocks.size());
  std::vector<Index> ids(out.indices.size());
  std::vector<const float*> views(out.indices.size());
  EXPECT_EQ(
      zen_row_decode_chunk<Index>(layout, w, 0, layout.slots(), bytes, pull.counts, pull.rows,
                                  pull.codings, ids.data(), nullptr, ids.size(), views.data()),
      ids.size())
      << label;
  EXPECT_EQ(ids, out.indices) << label;
  for (std::size_t k = 0; k < views.size(); ++k) {
    ASSERT_GE(views[k], storage.data()) << label;
    ASSERT_LE(views[k] + w, storage.data() + storage.size()) << label;
    EXPECT_EQ(std::memcmp(views[k], out.values.data() + k * w, w * sizeof(float)), 0) << label;
  }
}

TEST(ZenRows, ExactOnEveryShapeAndFormat) {
  for (const auto coding : {PullCoding::coo, PullCoding::bitmap_or_coo, PullCoding::smallest,
                            PullCoding::elias_fano, PullCoding::elias_fano_complement}) {
    for (const std::uint32_t n : {1u, 3u, 5u, 16u}) {
      for (const double d : {0.0, 0.003, 0.1, 1.0}) {
        expect_sum<std::uint32_t>(2503, 4, n, d, coding);  // R not a multiple of 64
        expect_sum<std::uint64_t>(64, 9, n, d, coding);
      }
      expect_sum<std::uint32_t>(1, 5, n, 1.0, coding);  // one row
    }
  }
}

// The pull in chunks of slot words: each server's block per chunk, decoded chunk after chunk into
// consecutive rows, gives the same sum as one chunk.
TEST(ZenRows, ChunksDecodeToTheSameSum) {
  const std::uint64_t R = 9001;
  const std::uint32_t n = 3, w = 5;
  const RowLayout layout(R, n, 7);
  const std::size_t words = layout.slots();  // 3001 strata
  for (const auto coding : {PullCoding::coo, PullCoding::bitmap_or_coo, PullCoding::elias_fano,
                            PullCoding::elias_fano_complement}) {
    std::vector<SparseGradient<std::uint32_t>> grads;
    std::vector<float> ref(R * w, 0.0f);
    std::vector<std::vector<std::uint8_t>> received(n);
    std::vector<std::vector<std::size_t>> counts(n, std::vector<std::size_t>(n));
    for (std::uint32_t r = 0; r < n; ++r) {
      grads.push_back(rows_of<std::uint32_t>(R, w, 0.05, static_cast<int>(r)));
      const auto d = grads.back().to_dense();
      for (std::size_t i = 0; i < d.size(); ++i) ref[i] += d[i];
      RowPartition<std::uint32_t> part;
      zen_row_partition(grads.back(), layout, part);
      std::size_t at = 0;
      for (std::uint32_t j = 0; j < n; ++j) {
        received[j].insert(received[j].end(), part.bytes.begin() + at,
                           part.bytes.begin() + at + part.counts[j]);
        counts[j][r] = part.counts[j];
        at += part.counts[j];
      }
    }
    std::vector<ZenRowSums> sums(n);
    for (std::uint32_t j = 0; j < n; ++j)
      zen_row_aggregate<std::uint32_t>(layout, j, w, received[j], counts[j], sums[j]);
    std::uint64_t total = 0;
    for (const auto& s : sums) total += s.rows;
    SparseGradient<std::uint32_t> out;
    out.elements = R * w;
    out.width = w;
    out.indices.resize(total);
    out.values.resize(total * w);
    std::size_t pos = 0;
    const std::vector<std::size_t> bounds{0, 1, 70, 1000, words};
    for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
      std::vector<std::uint8_t> blocks;
      std::vector<std::size_t> sizes;
      std::vector<std::uint64_t> rows;
      for (std::uint32_t j = 0; j < n; ++j) {
        sizes.push_back(zen_row_encode<std::uint32_t>(layout, j, sums[j], coding, bounds[p],
                                                      bounds[p + 1], blocks));
        rows.push_back(sums[j].rows_in(bounds[p], bounds[p + 1]));
      }
      const std::vector<PullCoding> codings(n, coding);
      pos += zen_row_decode_chunk<std::uint32_t>(layout, w, bounds[p], bounds[p + 1], blocks, sizes,
                                                 rows, codings, out.indices.data() + pos,
                                                 out.values.data() + pos * w, total - pos);
    }
    EXPECT_EQ(pos, total);
    ASSERT_FALSE(out.check().has_value()) << out.check().value_or("");
    EXPECT_EQ(out.to_dense(), ref) << "coding " << static_cast<int>(coding);
  }
}

TEST(ZenRows, BitmapWhereSmallerThanIds) {
  const RowLayout layout(4096, 2, 7);
  std::vector<SparseGradient<std::uint32_t>> dense_rows{rows_of<std::uint32_t>(4096, 2, 1.0, 0),
                                                        rows_of<std::uint32_t>(4096, 2, 1.0, 1)};
  const Pull pull = push_and_encode(dense_rows, layout, PullCoding::bitmap_or_coo);
  EXPECT_EQ(pull.blocks[0], 1);  // bitmap: 256 bytes against 8 KiB of ids
  // 9 header bytes + bitmap, 3 zero bytes (the values start at a multiple of 4), values.
  EXPECT_EQ(pull.counts[0], 9 + zen_row_key_bits(layout) / 8 + 3 + pull.rows[0] * 2 * 4);
  // A padding byte that is not zero: the block is refused, naming its server.
  Pull bad = pull;
  bad.blocks[9 + zen_row_key_bits(layout) / 8 + 1] = 1;
  SparseGradient<std::uint32_t> out;
  try {
    zen_row_decode<std::uint32_t>(layout, 2, bad.blocks, bad.counts, bad.rows, bad.codings, out);
    ADD_FAILURE() << "a non-zero padding byte was accepted";
  } catch (const MalformedMessage& e) {
    EXPECT_NE(std::string(e.what()).find("server 0: padding after the key is not zero"),
              std::string::npos)
        << e.what();
  }
}

TEST(ZenRows, AggregateRefusesMalformedPush) {
  const RowLayout layout(1000, 2, 7);
  ZenRowSums sums;
  // A part that is not a whole number of rows (w = 3: 4 + 12 bytes per row).
  std::vector<std::uint8_t> bytes(17, 0);
  std::vector<std::size_t> counts{17, 0};
  try {
    zen_row_aggregate<std::uint32_t>(layout, 0, 3, bytes, counts, sums);
    ADD_FAILURE() << "accepted 17 bytes";
  } catch (const MalformedMessage& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  // A row server 0 does not own, from rank 1.
  std::uint32_t row = 0;
  while (layout.owner(row) == 0) ++row;
  bytes.assign(16, 0);
  std::memcpy(bytes.data(), &row, 4);
  counts = {0, 16};
  try {
    zen_row_aggregate<std::uint32_t>(layout, 0, 3, bytes, counts, sums);
    ADD_FAILURE() << "accepted row " << row;
  } catch (const MalformedMessage& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

TEST(ZenRows, DecodeRefusesCorruptBlocks) {
  const std::uint64_t R = 300;  // the last granule is partial: slots past R exist
  const RowLayout layout(R, 2, 7);
  std::vector<SparseGradient<std::uint32_t>> grads{rows_of<std::uint32_t>(R, 3, 0.5, 0),
                                                   rows_of<std::uint32_t>(R, 3, 0.5, 1)};
  for (const auto coding : {PullCoding::coo, PullCoding::bitmap_or_coo, PullCoding::elias_fano,
                            PullCoding::elias_fano_complement}) {
    const Pull good = push_and_encode(grads, layout, coding);
    SparseGradient<std::uint32_t> out;
    auto refused = [&](Pull p, const std::string& what) {
      EXPECT_THROW(
          zen_row_decode<std::uint32_t>(layout, 3, p.blocks, p.counts, p.rows, p.codings, out),
          std::runtime_error)
          << what << " coding " << static_cast<int>(coding);
    };
    Pull p = good;
    p.rows[1] += 1;  // a count that does not match the block
    refused(p, "count");
    p = good;
    p.blocks[good.counts[0]] ^= 3;  // server 1's format byte
    refused(p, "format");
    p = good;
    p.counts[1] -= 1;
    p.blocks.pop_back();
    refused(p, "truncated");
    if (coding == PullCoding::coo) {
      p = good;  // server 0's first id replaced by a row it does not own
      std::uint32_t row = 0;
      while (layout.owner(row) == 0) ++row;
      std::memcpy(p.blocks.data() + 9, &row, 4);
      refused(p, "foreign row");
    }
  }
  // A bitmap bit past R: R = 301 rows on 2 servers, 151 slots; slot 150 holds rows 300 and 301,
  // so one server's slot 150 stands for row 301. Set it (clearing another bit: the same count).
  const RowLayout odd(301, 2, 7);
  std::vector<SparseGradient<std::uint32_t>> all_rows{rows_of<std::uint32_t>(301, 3, 1.0, 0),
                                                      rows_of<std::uint32_t>(301, 3, 1.0, 1)};
  Pull p = push_and_encode(all_rows, odd, PullCoding::bitmap_or_coo);
  const std::uint32_t j = odd.owner(300) == 0 ? 1 : 0;  // the server whose slot 150 is row 301
  ASSERT_EQ(odd.row_of(j, 150), 301u);
  const std::size_t begin = j == 0 ? 0 : p.counts[0];
  ASSERT_EQ(p.blocks[begin], 1);  // bitmap
  std::uint8_t& byte = p.blocks[begin + 9 + 150 / 8];
  ASSERT_EQ(byte & (1u << (150 % 8)), 0u);
  byte |= static_cast<std::uint8_t>(1u << (150 % 8));
  p.blocks[begin + 9] &= static_cast<std::uint8_t>(p.blocks[begin + 9] - 1);
  SparseGradient<std::uint32_t> out;
  try {
    zen_row_decode<std::uint32_t>(odd, 3, p.blocks, p.counts, p.rows, p.codings, out);
    ADD_FAILURE() << "accepted row 301 of 301";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("row 301"), std::string::npos) << e.what();
  }
}

// The row layout: every row has one owner, every server one row per full stratum, slots in row
// order, and hot small rows spread over all servers.
TEST(ZenRows, LayoutOwnsEachRowOnceAndBalances) {
  const RowLayout layout(1003, 16, 5);
  std::vector<std::vector<std::uint64_t>> owned(16);
  for (std::uint64_t r = 0; r < 1003; ++r) {
    const auto j = layout.owner(r);
    ASSERT_LT(j, 16u);
    EXPECT_EQ(layout.row_of(j, layout.slot(r)), r);
    owned[j].push_back(r);
  }
  for (const auto& rows : owned) {
    EXPECT_GE(rows.size(), 62u);
    EXPECT_LE(rows.size(), 63u);
  }
  std::vector<int> first(16, 0);
  for (std::uint64_t r = 0; r < 16; ++r) ++first[layout.owner(r)];
  EXPECT_EQ(first, std::vector<int>(16, 1));  // the 16 hottest rows: one per server
}

TEST(SparseGradientBlocks, CheckExpandGroup) {
  SparseGradient<std::uint32_t> g;
  g.elements = 12;
  g.width = 4;
  g.indices = {0, 2};
  g.values = {1, 0, 2, 0, 3, 4, 0, 5};
  ASSERT_FALSE(g.check().has_value()) << *g.check();
  EXPECT_EQ(g.to_dense(), (std::vector<float>{1, 0, 2, 0, 0, 0, 0, 0, 3, 4, 0, 5}));
  SparseGradient<std::uint32_t> e;
  sparse::expand_blocks(g, e);
  EXPECT_EQ(e.width, 1u);
  EXPECT_EQ(e.indices, (std::vector<std::uint32_t>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(e.to_dense(), g.to_dense());
  const auto back =
      sparse::group_blocks(sparse::SparseGradient<std::uint32_t>::from_dense(g.to_dense()), 4);
  EXPECT_EQ(back.indices, g.indices);
  EXPECT_EQ(back.values, g.values);
  auto bad = g;
  bad.indices = {0, 3};
  EXPECT_NE(bad.check().value_or("").find("block 3"), std::string::npos);
  bad = g;
  bad.values.pop_back();
  EXPECT_NE(bad.check().value_or("").find("blocks of 4"), std::string::npos);
  bad = g;
  bad.elements = 13;
  EXPECT_NE(bad.check().value_or("").find("not a multiple"), std::string::npos);
  bad = g;
  bad.width = 0;
  EXPECT_TRUE(bad.check().has_value());
  EXPECT_THROW(sparse::group_blocks(e, 5), sparse::InvalidGradient);
}

}  // namespace
