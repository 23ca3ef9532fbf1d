#include "atoll/sparse/elias_fano.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace atl::sparse {
namespace {

// The high part's length in bits: the last position's high part plus the k − 1 ones before it.
std::uint64_t high_bits(std::uint64_t universe, std::uint64_t count, unsigned low) {
  return count + ((universe - 1) >> low);
}

std::uint64_t low_bytes(std::uint64_t count, unsigned low) { return (count * low + 7) / 8; }

// Bit-packed fields, least significant bit first. Whole 64-bit words where the buffer has room
// (`bytes_len` bytes in all), bit by bit at its end.
void put_bits(std::uint8_t* bytes, std::uint64_t bytes_len, std::uint64_t at, std::uint64_t value,
              unsigned width) {
  if (width == 0) return;
  const std::uint64_t byte = at / 8;
  const unsigned shift = static_cast<unsigned>(at % 8);
  if (width + shift <= 64 && byte + 8 <= bytes_len) {
    std::uint64_t word;
    std::memcpy(&word, bytes + byte, 8);
    word |= value << shift;
    std::memcpy(bytes + byte, &word, 8);
    return;
  }
  for (unsigned b = 0; b < width; ++b) {
    if ((value >> b) & 1) bytes[(at + b) / 8] |= static_cast<std::uint8_t>(1u << ((at + b) % 8));
  }
}

std::uint64_t get_bits(const std::uint8_t* bytes, std::uint64_t bytes_len, std::uint64_t at,
                       unsigned width) {
  if (width == 0) return 0;
  const std::uint64_t byte = at / 8;
  const unsigned shift = static_cast<unsigned>(at % 8);
  if (width + shift <= 64 && byte + 8 <= bytes_len) {
    std::uint64_t word;
    std::memcpy(&word, bytes + byte, 8);
    return (word >> shift) & (~std::uint64_t{0} >> (64 - width));
  }
  std::uint64_t v = 0;
  for (unsigned b = 0; b < width; ++b)
    v |= std::uint64_t{(bytes[(at + b) / 8] >> ((at + b) % 8)) & 1u} << b;
  return v;
}

// Walks the code of `count` positions in [0, universe), validating every field, and calls
// visit(i, position) in increasing order. std::runtime_error naming what is wrong otherwise.
template <class Visit>
void elias_fano_walk(std::span<const std::uint8_t> code, std::uint64_t universe,
                     std::uint64_t count, Visit&& visit) {
  if (count > universe) {
    throw std::runtime_error(
        fmt::format("Elias-Fano block: {} positions in a universe of {}", count, universe));
  }
  if (code.size() != elias_fano_bytes(universe, count)) {
    throw std::runtime_error(fmt::format("Elias-Fano block: {} bytes for {} positions in {} ({})",
                                         code.size(), count, universe,
                                         elias_fano_bytes(universe, count)));
  }
  if (count == 0) return;
  const unsigned low = elias_fano_low_bits(universe, count);
  const std::uint64_t lb = low_bytes(count, low), hb = high_bits(universe, count, low);
  const std::uint8_t* lows = code.data();
  if (count * low % 8 != 0 && (lows[lb - 1] >> (count * low % 8)) != 0) {
    throw std::runtime_error("Elias-Fano block: bits set past the low part");
  }
  const std::uint8_t* highs = code.data() + lb;
  const std::uint64_t high_len = code.size() - lb;
  std::uint64_t i = 0, previous = 0;
  for (std::uint64_t byte = 0; byte < high_len; byte += 8) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, highs + byte, std::min<std::uint64_t>(8, high_len - byte));
    while (bits != 0) {
      const std::uint64_t p = byte * 8 + static_cast<unsigned>(std::countr_zero(bits));
      bits &= bits - 1;
      if (i == count || p >= hb) {
        throw std::runtime_error(fmt::format(
            "Elias-Fano block: more than {} ones in the high part, or one past its {} bits", count,
            hb));
      }
      const std::uint64_t x = ((p - i) << low) | get_bits(lows, lb, i * low, low);
      if (x >= universe || (i > 0 && x <= previous)) {
        throw std::runtime_error(fmt::format(
            "Elias-Fano block: position {} ({}) is not below {} and above the one before", i, x,
            universe));
      }
      visit(i, x);
      previous = x;
      ++i;
    }
  }
  if (i != count) {
    throw std::runtime_error(
        fmt::format("Elias-Fano block: {} ones in the high part, not {}", i, count));
  }
}

}  // namespace

unsigned elias_fano_low_bits(std::uint64_t universe, std::uint64_t count) {
  if (count == 0 || universe <= count) return 0;
  return static_cast<unsigned>(std::bit_width(universe / count) - 1);
}

std::uint64_t elias_fano_bytes(std::uint64_t universe, std::uint64_t count) {
  if (count == 0) return 0;
  const unsigned low = elias_fano_low_bits(universe, count);
  return low_bytes(count, low) + (high_bits(universe, count, low) + 7) / 8;
}

void elias_fano_encode(std::span<const std::uint64_t> positions, std::uint64_t universe,
                       std::vector<std::uint8_t>& out) {
  const std::uint64_t k = positions.size();
  if (k == 0) return;
  if (k > universe) {
    throw std::invalid_argument(
        fmt::format("elias_fano_encode: {} positions in a universe of {}", k, universe));
  }
  const unsigned low = elias_fano_low_bits(universe, k);
  const std::size_t at = out.size();
  out.resize(at + elias_fano_bytes(universe, k), 0);
  std::uint8_t* lows = out.data() + at;
  std::uint8_t* highs = lows + low_bytes(k, low);
  const std::uint64_t mask = low == 0 ? 0 : (~std::uint64_t{0} >> (64 - low));
  for (std::uint64_t i = 0; i < k; ++i) {
    const std::uint64_t x = positions[i];
    if (x >= universe || (i > 0 && x <= positions[i - 1])) {
      out.resize(at);
      throw std::invalid_argument(fmt::format(
          "elias_fano_encode: position {} ({}) is not below {} and above the one before", i, x,
          universe));
    }
    put_bits(lows, low_bytes(k, low), i * low, x & mask, low);
    const std::uint64_t h = (x >> low) + i;
    highs[h / 8] |= static_cast<std::uint8_t>(1u << (h % 8));
  }
}

void elias_fano_decode(std::span<const std::uint8_t> code, std::uint64_t universe,
                       std::uint64_t count, std::vector<std::uint64_t>& out) {
  out.clear();
  out.reserve(std::min(count, universe));
  elias_fano_walk(code, universe, count, [&](std::uint64_t, std::uint64_t x) { out.push_back(x); });
}

void elias_fano_decode_bitmap(std::span<const std::uint8_t> code, std::uint64_t universe,
                              std::uint64_t count, std::span<std::uint64_t> words) {
  if (words.size() != (universe + 63) / 64) {
    throw std::invalid_argument(fmt::format(
        "elias_fano_decode_bitmap: {} words for a universe of {}", words.size(), universe));
  }
  std::fill(words.begin(), words.end(), 0);
  elias_fano_walk(code, universe, count, [&](std::uint64_t, std::uint64_t x) {
    words[x / 64] |= std::uint64_t{1} << (x % 64);
  });
}

void elias_fano_encode_words(std::span<const std::uint64_t> words, std::uint64_t universe,
                             bool complement, std::vector<std::uint8_t>& out) {
  if (words.size() != (universe + 63) / 64) {
    throw std::invalid_argument(fmt::format(
        "elias_fano_encode_words: {} words for a universe of {}", words.size(), universe));
  }
  const std::uint64_t flip = complement ? ~std::uint64_t{0} : 0;
  std::vector<std::uint64_t> positions;
  for (std::size_t k = 0; k < words.size(); ++k) {
    std::uint64_t word = words[k] ^ flip;
    if (k + 1 == words.size() && universe % 64) word &= (std::uint64_t{1} << (universe % 64)) - 1;
    for (; word; word &= word - 1)
      positions.push_back(k * 64 + static_cast<std::uint64_t>(std::countr_zero(word)));
  }
  elias_fano_encode(positions, universe, out);
}

void elias_fano_decode_words(std::span<const std::uint8_t> code, std::uint64_t universe,
                             std::uint64_t set, bool complement, std::span<std::uint64_t> words) {
  if (set > universe) {
    throw std::runtime_error(
        fmt::format("elias_fano: {} positions set in a universe of {}", set, universe));
  }
  elias_fano_decode_bitmap(code, universe, complement ? universe - set : set, words);
  if (!complement) return;
  for (auto& word : words) word = ~word;
  if (universe % 64 && !words.empty()) words.back() &= (std::uint64_t{1} << (universe % 64)) - 1;
}

double subset_entropy_bits(std::uint64_t universe, std::uint64_t count) {
  if (count == 0 || count >= universe) return 0;
  const double u = static_cast<double>(universe), k = static_cast<double>(count);
  return (std::lgamma(u + 1) - std::lgamma(k + 1) - std::lgamma(u - k + 1)) / std::log(2.0);
}

}  // namespace atl::sparse
