// Elias–Fano codec (atoll/sparse/elias_fano.h): exact round trips at every block shape, sizes as
// announced, within 2 bits per position of the entropy bound, and refusal of corrupt blocks.
#include "atoll/sparse/elias_fano.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using atl::sparse::elias_fano_bytes;
using atl::sparse::elias_fano_decode;
using atl::sparse::elias_fano_encode;
using atl::sparse::subset_entropy_bits;

std::vector<std::uint64_t> round_trip(const std::vector<std::uint64_t>& positions,
                                      std::uint64_t universe) {
  std::vector<std::uint8_t> code{0xAB};  // appended after what the buffer holds
  elias_fano_encode(positions, universe, code);
  EXPECT_EQ(code.size(), 1 + elias_fano_bytes(universe, positions.size()));
  EXPECT_EQ(code[0], 0xAB);
  std::vector<std::uint64_t> out{7};
  elias_fano_decode(std::span(code).subspan(1), universe, positions.size(), out);
  // The bitmap form (Zen's pull decoder): the same positions, and no other bit.
  if (universe <= (1u << 20)) {
    std::vector<std::uint64_t> words((universe + 63) / 64, ~std::uint64_t{0});
    atl::sparse::elias_fano_decode_bitmap(std::span(code).subspan(1), universe, positions.size(),
                                          words);
    std::vector<std::uint64_t> set;
    for (std::uint64_t x = 0; x < universe; ++x)
      if ((words[x / 64] >> (x % 64)) & 1) set.push_back(x);
    EXPECT_EQ(set, out) << "bitmap decode, universe " << universe;
  }
  return out;
}

std::vector<std::uint64_t> random_subset(std::uint64_t universe, std::uint64_t k,
                                         std::mt19937_64& rng) {
  std::vector<bool> in(universe, false);
  std::uint64_t have = 0;
  while (have < k) {
    const auto x = rng() % universe;
    if (!in[x]) in[x] = true, ++have;
  }
  std::vector<std::uint64_t> v;
  for (std::uint64_t x = 0; x < universe; ++x)
    if (in[x]) v.push_back(x);
  return v;
}

TEST(EliasFano, EdgeShapesRoundTrip) {
  for (std::uint64_t u : {1ull, 2ull, 3ull, 63ull, 64ull, 65ull, 100ull, 1000ull, 4097ull}) {
    EXPECT_TRUE(round_trip({}, u).empty()) << u;
    EXPECT_EQ(round_trip({0}, u), std::vector<std::uint64_t>{0}) << u;          // first index
    EXPECT_EQ(round_trip({u - 1}, u), std::vector<std::uint64_t>{u - 1}) << u;  // last index
    std::vector<std::uint64_t> full(u);
    for (std::uint64_t x = 0; x < u; ++x) full[x] = x;
    EXPECT_EQ(round_trip(full, u), full) << u;  // every position
    if (u >= 2) {
      EXPECT_EQ(round_trip({0, u - 1}, u), (std::vector<std::uint64_t>{0, u - 1})) << u;
    }
  }
}

// Low parts of up to 61 bits: the packed fields straddle 64-bit words.
TEST(EliasFano, WideLowPartsRoundTrip) {
  for (unsigned bits : {33u, 40u, 62u, 63u}) {
    const std::uint64_t u = std::uint64_t{1} << bits;
    const std::vector<std::uint64_t> v{0, 1, 12345, u / 3, u / 2 + 7, u - 2, u - 1};
    EXPECT_EQ(round_trip(v, u), v) << bits;
  }
}

TEST(EliasFano, RandomSubsetsRoundTripNearTheEntropyBound) {
  std::mt19937_64 rng(3);
  for (std::uint64_t u : {64ull, 777ull, 4096ull, 100003ull}) {
    for (double share : {0.001, 0.01, 0.1, 0.5, 0.9}) {
      const auto k = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(share * u));
      const auto v = random_subset(u, k, rng);
      EXPECT_EQ(round_trip(v, u), v) << u << " " << k;
      // At most 2 + ceil(log2(u/k)) bits per position (the classic bound) plus byte rounding.
      const double bits = 8.0 * static_cast<double>(elias_fano_bytes(u, k));
      const double bound = subset_entropy_bits(u, k);
      EXPECT_LE(bits, bound + 2.0 * k + 16 + 1.5 * k) << u << " " << k;
      EXPECT_GE(bits + 1e-9, bound) << u << " " << k;  // no code beats the bound
    }
  }
}

TEST(EliasFano, EncoderRefusesUnsortedRepeatedOrOutOfRange) {
  std::vector<std::uint8_t> code;
  EXPECT_THROW(elias_fano_encode(std::vector<std::uint64_t>{3, 2}, 10, code),
               std::invalid_argument);
  EXPECT_THROW(elias_fano_encode(std::vector<std::uint64_t>{2, 2}, 10, code),
               std::invalid_argument);
  EXPECT_THROW(elias_fano_encode(std::vector<std::uint64_t>{10}, 10, code), std::invalid_argument);
  EXPECT_TRUE(code.empty());  // nothing half-written is left behind
}

TEST(EliasFano, DecoderRefusesCorruptBlocks) {
  const std::uint64_t u = 1000;
  const std::vector<std::uint64_t> v{0, 5, 17, 400, 999};
  std::vector<std::uint8_t> code;
  elias_fano_encode(v, u, code);
  std::vector<std::uint64_t> out;
  // Wrong size, wrong count.
  EXPECT_THROW(elias_fano_decode(std::span(code).first(code.size() - 1), u, 5, out),
               std::runtime_error);
  EXPECT_THROW(elias_fano_decode(code, u, 6, out), std::runtime_error);
  EXPECT_THROW(elias_fano_decode(code, u, 2000, out), std::runtime_error);
  // Every single flipped bit is either refused or decodes to another valid sorted set in range.
  for (std::size_t bit = 0; bit < code.size() * 8; ++bit) {
    auto bad = code;
    bad[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    try {
      elias_fano_decode(bad, u, 5, out);
      ASSERT_EQ(out.size(), 5u);
      for (std::size_t i = 0; i < out.size(); ++i) {
        EXPECT_LT(out[i], u);
        if (i > 0) {
          EXPECT_LT(out[i - 1], out[i]);
        }
      }
      EXPECT_NE(out, v) << bit;
    } catch (const std::runtime_error&) {
    }
  }
}

// The bitmap forms Zen's pull blocks use: the set bits, or with `complement` the clear ones, of
// words over a universe (bits past it ignored on encode, never set on decode).
TEST(EliasFano, WordsRoundTripSetAndComplement) {
  std::mt19937_64 rng(11);
  for (std::uint64_t u : {1ull, 63ull, 64ull, 65ull, 130ull, 4096ull, 4097ull}) {
    const std::uint64_t nwords = (u + 63) / 64;
    for (std::uint64_t k : {std::uint64_t{0}, std::uint64_t{1}, u / 2, u - 1, u}) {
      const auto v = random_subset(u, k, rng);
      std::vector<std::uint64_t> words(nwords, 0);
      for (auto x : v) words[x / 64] |= std::uint64_t{1} << (x % 64);
      if (u % 64) words.back() |= ~std::uint64_t{0} << (u % 64);  // garbage past the universe
      for (bool complement : {false, true}) {
        std::vector<std::uint8_t> code;
        atl::sparse::elias_fano_encode_words(words, u, complement, code);
        EXPECT_EQ(code.size(), elias_fano_bytes(u, complement ? u - k : k)) << u << " " << k;
        std::vector<std::uint64_t> back(nwords, ~std::uint64_t{0});
        atl::sparse::elias_fano_decode_words(code, u, k, complement, back);
        std::vector<std::uint64_t> expect(nwords, 0);
        for (auto x : v) expect[x / 64] |= std::uint64_t{1} << (x % 64);
        EXPECT_EQ(back, expect) << "universe " << u << ", " << k << " set, complement "
                                << complement;
      }
    }
  }
  std::vector<std::uint64_t> words(1, 0);
  EXPECT_THROW(atl::sparse::elias_fano_decode_words({}, 64, 65, true, words), std::runtime_error);
  std::vector<std::uint8_t> code;
  EXPECT_THROW(atl::sparse::elias_fano_encode_words(words, 65, false, code),
               std::invalid_argument);  // 65 positions need two words
}

TEST(EliasFano, EntropyBound) {
  EXPECT_EQ(subset_entropy_bits(10, 0), 0);
  EXPECT_EQ(subset_entropy_bits(10, 10), 0);
  EXPECT_NEAR(subset_entropy_bits(4, 2), std::log2(6.0), 1e-9);
  EXPECT_NEAR(subset_entropy_bits(64, 1), 6.0, 1e-9);
}

}  // namespace
