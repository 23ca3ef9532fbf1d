// Zen's pull folded in place: zen_fold.h.
#include "zen_fold.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "atoll/sync/entry_fold.h"
#include "atoll/util/cpu_features.h"
#include "zen_blocks.h"
#include "zen_views.h"
#include "zen_wide.h"

namespace atl::sync {
namespace {
using namespace zen_blocks;
using zen_views::malformed;
using zen_views::View;

// Server j's bitmap block: word k covers granule granules[k]. Checks as the decoder's: the words'
// bits count exactly the block's values, and no bit lies past M.
EntryFold fold_bitmap_portable(std::uint32_t j, const View& v,
                               std::span<const std::uint64_t> granules) {
  EntryFold f;
  std::uint64_t c = 0;
  for (std::size_t k = 0; k < granules.size(); ++k) {
    std::uint64_t word;
    std::memcpy(&word, v.keys + 8 * k, 8);
    const auto count = static_cast<std::uint64_t>(std::popcount(word));
    if (c + count > v.nnz)
      throw malformed(j, "bitmap does not match its values or has a bit past M");
    const std::uint64_t base = granules[k] * kZenGranule;
    const std::uint8_t* vals = v.values + c * sizeof(float);
    for (std::uint64_t e = 0; e < count; ++e) {
      std::uint32_t b;
      std::memcpy(&b, vals + e * sizeof(float), sizeof(float));
      if (b & 0x7FFFFFFFu) {
        f.sum += entry_term(base + static_cast<std::uint64_t>(std::countr_zero(word)), b);
        ++f.count;
      }
      word &= word - 1;
    }
    c += count;
  }
  if (c != v.nnz) throw malformed(j, "bitmap does not match its values or has a bit past M");
  return f;
}

#if ATOLL_HAVE_AVX512_KERNELS
// Sixteen of a word's entries: bit positions p (bytes) from base, values x; lanes outside valid
// skipped (zen_wide::fold_sixteen, with the indices made here).
ATOLL_AVX512 inline void fold_round(__m512i base, __m128i p, const std::uint8_t* vals,
                                    __mmask16 valid, __m512i& acc, std::uint64_t& count) {
  const __m512i i = _mm512_add_epi32(base, _mm512_maskz_cvtepu8_epi32(0xFFFF, p));
  zen_wide::fold_sixteen(i, _mm512_maskz_loadu_epi32(valid, vals), valid, acc, count);
}

inline __mmask16 lanes_left(std::uint64_t count, unsigned round) {
  const std::uint64_t left = count - 16 * round;
  return static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1);
}

// The same walk with a word's set bits found by one byte compress (as the decoder's kernel), 16
// entries per round; the values are read with masked loads, never past the word's count.
ATOLL_AVX512 EntryFold fold_bitmap_wide(std::uint32_t j, const View& v,
                                        std::span<const std::uint64_t> granules) {
  alignas(64) static constexpr std::uint8_t kBits[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i positions = _mm512_load_si512(kBits);
  __m512i acc = _mm512_setzero_si512();
  std::uint64_t folded = 0, c = 0;
  for (std::size_t k = 0; k < granules.size(); ++k) {
    std::uint64_t word;
    std::memcpy(&word, v.keys + 8 * k, 8);
    const auto count = static_cast<std::uint64_t>(std::popcount(word));
    if (c + count > v.nnz)
      throw malformed(j, "bitmap does not match its values or has a bit past M");
    // An empty word takes its first round too (nothing read, nothing folded): whether a granule of
    // a Zipf gradient holds anything is close to a coin toss, a branch on it mispredicts often.
    const std::uint8_t* vals = v.values + c * sizeof(float);
    c += count;
    __builtin_prefetch(v.keys + 8 * k + 512);
    __builtin_prefetch(vals + 1024);
    const __m512i bits = _mm512_maskz_compress_epi8(word, positions);
    const __m512i base = _mm512_set1_epi32(static_cast<int>(granules[k] * kZenGranule));
    fold_round(base, _mm512_maskz_extracti32x4_epi32(0xF, bits, 0), vals, lanes_left(count, 0), acc,
               folded);
    if (count > 16) {
      fold_round(base, _mm512_maskz_extracti32x4_epi32(0xF, bits, 1), vals + 64,
                 lanes_left(count, 1), acc, folded);
      if (count > 32) {
        fold_round(base, _mm512_maskz_extracti32x4_epi32(0xF, bits, 2), vals + 128,
                   lanes_left(count, 2), acc, folded);
        if (count > 48)
          fold_round(base, _mm512_maskz_extracti32x4_epi32(0xF, bits, 3), vals + 192,
                     lanes_left(count, 3), acc, folded);
      }
    }
  }
  if (c != v.nnz) throw malformed(j, "bitmap does not match its values or has a bit past M");
  return EntryFold{zen_wide::lanes_sum(acc), folded};
}
#endif

// Server j's COO block: strictly increasing indices, each in one of the server's granules of the
// chunk, below M.
template <class Index>
EntryFold fold_coo(std::uint32_t j, const View& v, const HashLayout& layout,
                   std::uint64_t granule_begin, std::uint64_t granule_end) {
  const std::uint16_t* owner = layout.owner_table().data();
  const std::uint64_t M = layout.elements();
  EntryFold f;
  std::uint64_t prev = 0;
  for (std::uint64_t k = 0; k < v.nnz; ++k) {
    Index x;
    std::memcpy(&x, v.keys + k * sizeof(Index), sizeof(Index));
    const auto i = static_cast<std::uint64_t>(x);
    const std::uint64_t g = i / kZenGranule;
    if (i >= M || g < granule_begin || g >= granule_end || owner[g] != j || (k > 0 && i <= prev))
      throw malformed(j, "COO indices unsorted, repeated or not owned");
    prev = i;
    std::uint32_t b;
    std::memcpy(&b, v.values + k * sizeof(float), sizeof(float));
    if (b & 0x7FFFFFFFu) {
      f.sum += entry_term(i, b);
      ++f.count;
    }
  }
  return f;
}

}  // namespace

template <class Index>
EntryFold zen_fold_pull_chunk(const HashLayout& layout, std::uint64_t granule_begin,
                              std::uint64_t granule_end, std::span<const std::uint8_t> blocks,
                              std::span<const std::size_t> counts,
                              const std::function<void()>& progress,
                              std::span<const std::uint32_t> order) {
  const auto n = static_cast<std::uint32_t>(counts.size());
  const std::uint64_t M = layout.elements();
  const std::uint64_t granules = (M + kZenGranule - 1) / kZenGranule;
  if (n != layout.servers() || granule_begin > granule_end || granule_end > granules) {
    throw std::runtime_error(fmt::format(
        "zen: pull chunk of granules [{}, {}) with {} blocks; the layout has {} granules and {} "
        "servers",
        granule_begin, granule_end, n, granules, layout.servers()));
  }
  const auto c = zen_views::parse_views(layout, granule_begin, granule_end, blocks, counts,
                                        sizeof(Index), order);
  const bool wide = util::avx512_kernels();
  (void)wide;
  EntryFold f;
  for (std::uint32_t j = 0; j < n; ++j) {
    const View& v = c.views[j];
    if (v.format != kBitmap) {
      f += fold_coo<Index>(j, v, layout, granule_begin, granule_end);
    } else {
      const auto all = layout.granules(j);
      const std::size_t a = layout.granules_before(j, granule_begin);
      const auto mine = all.subspan(a, layout.granules_before(j, granule_end) - a);
      // Bits past M: only in the last granule, which is the server's last where it is its own.
      if (!mine.empty() && M % kZenGranule != 0 && mine.back() == granules - 1) {
        std::uint64_t word;
        std::memcpy(&word, v.keys + 8 * (mine.size() - 1), 8);
        if (word >> (M % kZenGranule))
          throw malformed(j, "bitmap does not match its values or has a bit past M");
      }
#if ATOLL_HAVE_AVX512_KERNELS
      if (wide && !mine.empty()) {
        f += fold_bitmap_wide(j, v, mine);
      } else
#endif
      {
        f += fold_bitmap_portable(j, v, mine);
      }
    }
    if (progress) progress();
  }
  return f;
}

template EntryFold zen_fold_pull_chunk<std::uint32_t>(const HashLayout&, std::uint64_t,
                                                      std::uint64_t, std::span<const std::uint8_t>,
                                                      std::span<const std::size_t>,
                                                      const std::function<void()>&,
                                                      std::span<const std::uint32_t>);
template EntryFold zen_fold_pull_chunk<std::uint64_t>(const HashLayout&, std::uint64_t,
                                                      std::uint64_t, std::span<const std::uint8_t>,
                                                      std::span<const std::size_t>,
                                                      const std::function<void()>&,
                                                      std::span<const std::uint32_t>);

}  // namespace atl::sync
