// Zen's pull folded in place: zen_fold.h.
#include "zen_fold.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

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

// A word's set bits as sixteen indices from base (the first popcount lanes meaningful): its bit
// positions by one byte compress (as the decoder's kernel), widened.
ATOLL_AVX512 inline __m512i word_indices(std::uint64_t word, std::uint64_t base,
                                         __m512i positions) {
  const __m512i bits = _mm512_maskz_compress_epi8(word, positions);
  return _mm512_add_epi32(
      _mm512_set1_epi32(static_cast<int>(base)),
      _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm512_maskz_extracti32x4_epi32(0xF, bits, 0)));
}

// Lanes [first, first + n) of sixteen (first + n <= 16).
inline __mmask16 lane_range(unsigned first, unsigned n) {
  return static_cast<__mmask16>(((1u << n) - 1) << first);
}

// A bitmap block's walk: its values taken in order, folded sixteen lanes at a time.
struct WideWalk {
  std::uint32_t j;
  const View& v;
  std::span<const std::uint64_t> granules;
  __m512i positions;  // bytes 0..63
  __m512i acc;
  std::uint64_t folded = 0, c = 0;

  // The next `count` values, checked against the block's.
  const std::uint8_t* take(std::uint64_t count) {
    if (c + count > v.nnz)
      throw malformed(j, "bitmap does not match its values or has a bit past M");
    const std::uint8_t* vals = v.values + c * sizeof(float);
    c += count;
    return vals;
  }

  // Word k alone, in rounds of 16. An empty word takes its first round too (nothing read, nothing
  // folded): whether a granule of a Zipf gradient holds anything is close to a coin toss, a
  // branch on it mispredicts often.
  ATOLL_AVX512 void word(std::size_t k, std::uint64_t w) {
    const auto count = static_cast<std::uint64_t>(std::popcount(w));
    const std::uint8_t* vals = take(count);
    __builtin_prefetch(vals + 1024);
    const __m512i bits = _mm512_maskz_compress_epi8(w, positions);
    const __m512i base = _mm512_set1_epi32(static_cast<int>(granules[k] * kZenGranule));
    for (unsigned r = 0; r < 4 && (r == 0 || count > 16 * r); ++r) {
      const __m128i p = r == 0   ? _mm512_maskz_extracti32x4_epi32(0xF, bits, 0)
                        : r == 1 ? _mm512_maskz_extracti32x4_epi32(0xF, bits, 1)
                        : r == 2 ? _mm512_maskz_extracti32x4_epi32(0xF, bits, 2)
                                 : _mm512_maskz_extracti32x4_epi32(0xF, bits, 3);
      fold_round(base, p, vals + 64 * r, lanes_left(count, r), acc, folded);
    }
  }

  // Words k..k+3 whose entries number at most sixteen (w: the words, n: their popcounts, total
  // their sum): one round, their indices packed by expansion.
  ATOLL_AVX512 void four_words(std::size_t k, const std::uint64_t* w, const unsigned* n,
                               unsigned total) {
    const std::uint8_t* vals = take(total);
    __builtin_prefetch(vals + 1024);
    __m512i i = word_indices(w[0], granules[k] * kZenGranule, positions);
    unsigned filled = n[0];
    for (unsigned q = 1; q < 4; ++q) {
      i = _mm512_mask_expand_epi32(i, lane_range(filled, n[q]),
                                   word_indices(w[q], granules[k + q] * kZenGranule, positions));
      filled += n[q];
    }
    const __mmask16 valid = lane_range(0, total);
    zen_wide::fold_sixteen(i, _mm512_maskz_loadu_epi32(valid, vals), valid, acc, folded);
  }
};

// The same walk, 16 entries per round; the values are read with masked loads, never past the
// entries counted. Four words whose entries number at most sixteen (the sparse words of a Zipf
// tail, two or three entries each) share one round.
ATOLL_AVX512 EntryFold fold_bitmap_wide(std::uint32_t j, const View& v,
                                        std::span<const std::uint64_t> granules) {
  alignas(64) static constexpr std::uint8_t kBits[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  WideWalk walk{j, v, granules, _mm512_load_si512(kBits), _mm512_setzero_si512()};
  std::size_t k = 0;
  for (; k + 4 <= granules.size(); k += 4) {
    std::uint64_t w[4];
    std::memcpy(w, v.keys + 8 * k, sizeof w);
    __builtin_prefetch(v.keys + 8 * k + 512);
    unsigned n[4], total = 0;
    for (unsigned q = 0; q < 4; ++q) total += n[q] = static_cast<unsigned>(std::popcount(w[q]));
    if (total <= 16) {
      walk.four_words(k, w, n, total);
    } else {
      for (unsigned q = 0; q < 4; ++q) walk.word(k + q, w[q]);
    }
  }
  for (; k < granules.size(); ++k) {
    std::uint64_t w;
    std::memcpy(&w, v.keys + 8 * k, 8);
    walk.word(k, w);
  }
  if (walk.c != v.nnz) throw malformed(j, "bitmap does not match its values or has a bit past M");
  return EntryFold{zen_wide::lanes_sum(walk.acc), walk.folded};
}
#endif

// Server j's COO block from entry k on (after index prev, where k > 0): strictly increasing
// indices, each in one of the server's granules of the chunk, below M.
template <class Index>
EntryFold fold_coo(std::uint32_t j, const View& v, const HashLayout& layout,
                   std::uint64_t granule_begin, std::uint64_t granule_end, std::uint64_t k = 0,
                   std::uint64_t prev = 0) {
  const std::uint16_t* owner = layout.owner_table().data();
  const std::uint64_t M = layout.elements();
  EntryFold f;
  for (; k < v.nnz; ++k) {
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

#if ATOLL_HAVE_AVX512_KERNELS
// The same checks and fold, sixteen 32-bit indices at a time while all sixteen pass; the portable
// loop takes the rest from the first vector that does not (and names the problem, if any).
ATOLL_AVX512 EntryFold fold_coo_wide(std::uint32_t j, const View& v, const HashLayout& layout,
                                     std::uint64_t granule_begin, std::uint64_t granule_end) {
  const auto owners = layout.owner_table();
  // Owners are gathered as 32-bit pairs (granules 2h and 2h + 1): only pairs inside the table.
  const std::uint64_t hi =
      std::min({layout.elements(), granule_end * kZenGranule,
                (owners.size() & ~std::uint64_t{1}) * kZenGranule, std::uint64_t{0xFFFFFFFFu}});
  const std::uint64_t lo = granule_begin * kZenGranule;
  if (lo >= hi) return fold_coo<std::uint32_t>(j, v, layout, granule_begin, granule_end);
  const __m512i lo_v = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i hi_v = _mm512_set1_epi32(static_cast<int>(hi));
  const __m512i server = _mm512_set1_epi32(static_cast<int>(j));
  __m512i acc = _mm512_setzero_si512();
  __m512i prev = _mm512_setzero_si512();
  std::uint64_t folded = 0, k = 0;
  for (; k + 16 <= v.nnz; k += 16) {
    const __m512i x = _mm512_loadu_si512(v.keys + 4 * k);
    // Lane i against lane i - 1, lane 0 against the last index of the previous vector.
    const __m512i before = _mm512_maskz_alignr_epi32(0xFFFF, x, prev, 15);
    __mmask16 ok = _mm512_cmpgt_epu32_mask(x, before);
    if (k == 0) ok |= 1;
    ok &= _mm512_cmpge_epu32_mask(x, lo_v) & _mm512_cmplt_epu32_mask(x, hi_v);
    if (ok != 0xFFFF) break;
    // (maskz forms: the unmasked ones read an "undefined" vector GCC 12 warns about)
    const __m512i g = _mm512_maskz_srli_epi32(0xFFFF, x, 6);
    const __m512i pair = _mm512_mask_i32gather_epi32(
        _mm512_setzero_si512(), 0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, g, 1), owners.data(), 4);
    const __m512i shift =
        _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_and_epi32(0xFFFF, g, _mm512_set1_epi32(1)), 4);
    const __m512i owner = _mm512_maskz_and_epi32(
        0xFFFF, _mm512_maskz_srlv_epi32(0xFFFF, pair, shift), _mm512_set1_epi32(0xFFFF));
    if (_mm512_cmpneq_epu32_mask(owner, server) != 0) break;
    zen_wide::fold_sixteen(x, _mm512_loadu_si512(v.values + 4 * k), 0xFFFF, acc, folded);
    prev = x;
  }
  std::uint32_t last = 0;
  if (k > 0) std::memcpy(&last, v.keys + 4 * (k - 1), 4);
  EntryFold f{zen_wide::lanes_sum(acc), folded};
  f += fold_coo<std::uint32_t>(j, v, layout, granule_begin, granule_end, k, last);
  return f;
}
#endif

template <class Index>
EntryFold fold_coo_any(std::uint32_t j, const View& v, const HashLayout& layout,
                       std::uint64_t granule_begin, std::uint64_t granule_end, bool wide) {
#if ATOLL_HAVE_AVX512_KERNELS
  if constexpr (std::is_same_v<Index, std::uint32_t>) {
    if (wide) return fold_coo_wide(j, v, layout, granule_begin, granule_end);
  }
#endif
  (void)wide;
  return fold_coo<Index>(j, v, layout, granule_begin, granule_end);
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
  EntryFold f;
  for (std::uint32_t j = 0; j < n; ++j) {
    const View& v = c.views[j];
    if (v.format != kBitmap) {
      f += fold_coo_any<Index>(j, v, layout, granule_begin, granule_end, wide);
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
