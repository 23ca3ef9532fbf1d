// Zen's pull blocks, server side (zen_partition.h, step 2 of the pull): a server's summed slots
// encoded as bitmap, COO or Elias-Fano blocks, the non-zero sums gathered by the portable or the
// AVX-512 kernel (zen_wide.h).
#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "atoll/sparse/elias_fano.h"
#include "atoll/sync/zen_partition.h"
#include "atoll/util/cpu_features.h"
#include "zen_blocks.h"
#include "zen_wide.h"

namespace atl::sync {

using zen_blocks::format_key_bytes;
using zen_blocks::kBitmap;
using zen_blocks::kBlockHeader;
using zen_blocks::kCoo;
using zen_blocks::kEliasFano;
using zen_blocks::kEliasFanoComplement;
using zen_blocks::lowest_bit_or_63;

namespace {
// The Elias-Fano code of the non-zero slots of [s0, s1) (positions relative to s0) into `keys`;
// with `empty`, of its empty slots (format kEliasFanoComplement). The non-zero bitmap exists in
// both of the server's forms (slot buffer and sorted entries).
template <class Index>
void encode_elias_fano(const ZenServerSums<Index>& sums, std::size_t s0, std::size_t s1, bool empty,
                       std::uint8_t* keys, std::size_t key_bytes) {
  std::vector<std::uint8_t> code;
  sparse::elias_fano_encode_words(
      std::span<const std::uint64_t>(sums.words.data() + s0 / kZenGranule, (s1 - s0) / kZenGranule),
      s1 - s0, empty, code);
  if (code.size() != key_bytes)
    throw std::logic_error("zen: Elias-Fano code of an unexpected size");
  if (key_bytes > 0) std::memcpy(keys, code.data(), key_bytes);
}
// The non-zero sums of words [wa, wb) of a server's slot buffer into `values` from entry k on
// (with `coo`, their indices into `keys`), in slot order; writes past the last entry (up to 16
// floats) stay below entry `limit`. Portable: eight set bits per round with no data-dependent
// branch inside the round (a word's bit count varies randomly, and a loop exiting on it
// mispredicts once per word); an exhausted word reads slot 63 of its granule, ignored. Wide: one
// compress per 16 slots.
template <class Index, bool kWide>
[[gnu::always_inline]] inline void gather_sums_impl(const HashLayout& layout, std::uint32_t server,
                                                    const ZenServerSums<Index>& sums, bool coo,
                                                    std::uint8_t* keys, std::uint8_t* values,
                                                    std::size_t wa, std::size_t wb, std::size_t k,
                                                    std::size_t limit) {
  const float* v = sums.buffer.data();
  for (std::size_t w = wa; w < wb; ++w) {
    const std::uint64_t word0 = sums.words[w];
    std::uint64_t word = word0;
    const std::size_t base = w * kZenGranule;
    const auto count = static_cast<std::size_t>(std::popcount(word));
    bool gathered = false;
#if ATOLL_HAVE_AVX512_KERNELS
    if constexpr (kWide) {
      if (k + count + 16 <= limit) {
        zen_wide::gather_word(word, v + base, reinterpret_cast<float*>(values + k * sizeof(float)));
        gathered = true;
      }
    }
#endif
    if (gathered) {
    } else if (k + ((count + 7) & ~std::size_t{7}) <= limit) {
      for (std::size_t done = 0; done < count; done += 8) {
        float round[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          round[r] = v[base + lowest_bit_or_63(word)];
          word &= word - 1;
        }
        std::memcpy(values + (k + done) * sizeof(float), round, sizeof(round));
      }
    } else {  // the last word of a task's range: exactly `count` values
      for (std::size_t r = 0; r < count; ++r, word &= word - 1)
        std::memcpy(values + (k + r) * sizeof(float), v + base + std::countr_zero(word),
                    sizeof(float));
    }
    if (coo) {
      word = word0;
      for (std::size_t r = 0; r < count; ++r) {
        const auto x = static_cast<Index>(
            layout.index_of(server, base + static_cast<std::size_t>(std::countr_zero(word))));
        std::memcpy(keys + (k + r) * sizeof(Index), &x, sizeof(Index));
        word &= word - 1;
      }
    }
    k += count;
  }
}

#if ATOLL_HAVE_AVX512_KERNELS
template <class Index>
ATOLL_AVX512 void gather_sums_wide(const HashLayout& layout, std::uint32_t server,
                                   const ZenServerSums<Index>& sums, bool coo, std::uint8_t* keys,
                                   std::uint8_t* values, std::size_t wa, std::size_t wb,
                                   std::size_t k, std::size_t limit) {
  gather_sums_impl<Index, true>(layout, server, sums, coo, keys, values, wa, wb, k, limit);
}
#endif

template <class Index>
void gather_sums(const HashLayout& layout, std::uint32_t server, const ZenServerSums<Index>& sums,
                 bool coo, std::uint8_t* keys, std::uint8_t* values, std::size_t wa, std::size_t wb,
                 std::size_t k, std::size_t limit) {
#if ATOLL_HAVE_AVX512_KERNELS
  if (util::avx512_kernels())
    return gather_sums_wide<Index>(layout, server, sums, coo, keys, values, wa, wb, k, limit);
#endif
  gather_sums_impl<Index, false>(layout, server, sums, coo, keys, values, wa, wb, k, limit);
}
}  // namespace

template <class Index>
std::size_t zen_encode_pull_chunk(const HashLayout& layout, std::uint32_t server,
                                  const ZenServerSums<Index>& sums, std::size_t s0, std::size_t s1,
                                  PullCoding coding, std::vector<std::uint8_t>& block,
                                  unsigned parts, const ParallelTasks& parallel) {
  const std::size_t w0 = s0 / kZenGranule, w1 = s1 / kZenGranule;
  const std::uint64_t e0 = sums.nnz_before[w0];
  const std::uint64_t nnz = sums.nnz_before[w1] - e0;
  const std::size_t at = block.size();
  const std::uint8_t format = zen_pull_format(s1 - s0, nnz, sizeof(Index), coding);
  const std::size_t key_bytes = format_key_bytes(format, s1 - s0, nnz, sizeof(Index));
  // Room for the gather's overshoot past the values (gather_sums), trimmed at the end.
  block.resize(at + kBlockHeader + key_bytes + (nnz + kZenEncodeSlack) * sizeof(float));
  std::uint8_t* out = block.data() + at;
  out[0] = format;
  std::memcpy(out + 1, &nnz, 8);
  std::uint8_t* keys = out + kBlockHeader;
  std::uint8_t* values = keys + key_bytes;
  // (key_bytes is 0 for a server with no slots in this chunk, whose words may have no storage.)
  if (format == kBitmap && key_bytes > 0) std::memcpy(keys, sums.words.data() + w0, key_bytes);
  if (format == kEliasFano || format == kEliasFanoComplement)
    encode_elias_fano(sums, s0, s1, format == kEliasFanoComplement, keys, key_bytes);
  if (sums.sparse) {
    // An empty server's vectors may have no storage: memcpy from null is undefined even for 0
    // bytes (found by fuzz/zen_push.cpp).
    if (format == kCoo && nnz > 0) std::memcpy(keys, sums.idx.data() + e0, key_bytes);
    if (nnz > 0) std::memcpy(values, sums.val.data() + e0, nnz * sizeof(float));
  } else {
    const auto gather = [&](std::size_t wa, std::size_t wb, std::size_t k, std::size_t limit) {
      gather_sums<Index>(layout, server, sums, format == kCoo, keys, values, wa, wb, k, limit);
    };
    if (parts <= 1 || w1 - w0 < 2 * parts) {
      gather(w0, w1, 0, nnz + kZenEncodeSlack);
    } else {
      // Task t gathers words [a_t, a_t+1); its first entry is known from the prefix counts.
      const auto task = [&](std::size_t t) {
        const std::size_t a = w0 + (w1 - w0) * t / parts, b = w0 + (w1 - w0) * (t + 1) / parts;
        const std::size_t end = sums.nnz_before[b] - e0;
        gather(a, b, sums.nnz_before[a] - e0, t + 1 == parts ? nnz + kZenEncodeSlack : end);
      };
      if (parallel)
        parallel(parts, task);
      else
        for (std::size_t t = 0; t < parts; ++t) task(t);
    }
  }
  block.resize(at + kBlockHeader + key_bytes + nnz * sizeof(float));
  return block.size() - at;
}

template <class Index>
void zen_encode_pull_block(const HashLayout& layout, std::uint32_t server,
                           std::vector<sparse::Entry<Index>>& received, PullCoding coding,
                           std::vector<std::uint8_t>& block) {
  const auto bounds = zen_granule_bounds(layout.elements(), 1);
  ZenServerSums<Index> sums;
  zen_aggregate(layout, server, received, bounds, sums);
  block.clear();
  zen_encode_pull_chunk(layout, server, sums, 0, layout.slot_count(server), coding, block);
}

#define ATOLL_ZEN_ENCODE_INSTANTIATE(I)                                                    \
  template std::size_t zen_encode_pull_chunk(                                              \
      const HashLayout&, std::uint32_t, const ZenServerSums<I>&, std::size_t, std::size_t, \
      PullCoding, std::vector<std::uint8_t>&, unsigned, const ParallelTasks&);             \
  template void zen_encode_pull_block(const HashLayout&, std::uint32_t,                    \
                                      std::vector<sparse::Entry<I>>&, PullCoding,          \
                                      std::vector<std::uint8_t>&);
ATOLL_ZEN_ENCODE_INSTANTIATE(std::uint32_t)
ATOLL_ZEN_ENCODE_INSTANTIATE(std::uint64_t)
#undef ATOLL_ZEN_ENCODE_INSTANTIATE

}  // namespace atl::sync
