// Zen's pull block format, shared by the encoder (zen_encode.cpp; sizes in zen_pull_layout.cpp)
// and the decoder (zen_decode.cpp): a 1-byte format, the non-zero count (8 bytes), the keys, then
// the values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "atoll/sparse/elias_fano.h"

namespace atl::sync::zen_blocks {

// kEliasFanoComplement: Elias-Fano of the block's empty slots (slots - nnz positions; slots is
// whole 64-bit words, and bits past the slots in use are empty), for dense blocks.
constexpr std::uint8_t kCoo = 0, kBitmap = 1, kEliasFano = 2, kEliasFanoComplement = 3;
constexpr std::size_t kBlockHeader = 1 + 8;

inline std::size_t format_key_bytes(std::uint8_t format, std::size_t slots, std::uint64_t nnz,
                                    std::size_t index_bytes) {
  if (format == kBitmap) return slots / 8;
  if (format == kEliasFano) return static_cast<std::size_t>(sparse::elias_fano_bytes(slots, nnz));
  if (format == kEliasFanoComplement)  // (nnz > slots, refused by every decoder, is sized as full)
    return static_cast<std::size_t>(
        sparse::elias_fano_bytes(slots, slots - std::min<std::uint64_t>(nnz, slots)));
  return static_cast<std::size_t>(nnz) * index_bytes;
}

// Position of the lowest set bit of a non-zero word; 63 for 0 (a harmless position inside the
// granule for 8-wide rounds over a word's bits). One bsf, no zero test.
inline unsigned lowest_bit_or_63(std::uint64_t word) {
  return static_cast<unsigned>(__builtin_ctzll(word | (std::uint64_t{1} << 63)));
}

}  // namespace atl::sync::zen_blocks
