// AVX-512 forms of Zen's per-word kernels (bitmap words of 64 slots), for functions compiled with
// ATOLL_AVX512 and called only where util::avx512_kernels() (one binary for every x86-64-v2 CPU).
// The portable forms stay beside their callers (zen_decode.cpp).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define ATOLL_HAVE_AVX512_KERNELS 1
#include <immintrin.h>

#include <cstdint>

#define ATOLL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt")))

namespace atl::sync::zen_wide {

// Sixteen entries: indices base + the bit positions in `sixteen` (bytes), values copied from vals.
ATOLL_AVX512 inline void emit_sixteen(__m512i base, __m128i sixteen, const std::uint8_t* vals,
                                      std::uint32_t* oi, float* ov) {
  // (maskz: the unmasked form reads an "undefined" vector GCC 12 warns about)
  _mm512_storeu_si512(oi, _mm512_add_epi32(base, _mm512_maskz_cvtepu8_epi32(0xFFFF, sixteen)));
  _mm512_storeu_ps(ov, _mm512_loadu_ps(vals));
}

// A word's entries: the indices base + p of its set bits p (one byte compress gives the p, widened
// 16 at a time) and its `count` values copied from vals (in slot order), 16 at a time; an empty
// word (count 0) takes one round too. Writes up to 16 entries past `count` at oi and ov; reads up
// to 16 values past vals + count.
ATOLL_AVX512 inline void emit_word(std::uint64_t word, std::uint32_t base, const std::uint8_t* vals,
                                   std::uint64_t count, std::uint32_t* oi, float* ov) {
  alignas(64) static constexpr std::uint8_t kBits[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  // The set bits' positions stay in one register: 16 of them per round, widened to indices.
  const __m512i bits = _mm512_maskz_compress_epi8(word, _mm512_load_si512(kBits));
  const __m512i b = _mm512_set1_epi32(static_cast<int>(base));
  // Even for an empty word: nothing it writes counts.
  emit_sixteen(b, _mm512_maskz_extracti32x4_epi32(0xF, bits, 0), vals, oi, ov);
  if (count > 16) {
    emit_sixteen(b, _mm512_maskz_extracti32x4_epi32(0xF, bits, 1), vals + 64, oi + 16, ov + 16);
    if (count > 32) {
      emit_sixteen(b, _mm512_maskz_extracti32x4_epi32(0xF, bits, 2), vals + 128, oi + 32, ov + 32);
      if (count > 48)
        emit_sixteen(b, _mm512_maskz_extracti32x4_epi32(0xF, bits, 3), vals + 192, oi + 48,
                     ov + 48);
    }
  }
}

// Up to `lanes` (1-16) of a COO block's sorted indices (keys, 4 bytes each) that lie in granule
// [base, base + 64), with their values (vals): checked, then copied to oi and ov (16 lanes are
// stored: up to 16 entries past the count; 16 keys and values are read). Returns how many lie
// there (16: call again for more), or -1 when they are not all at least base or not strictly
// increasing (the first against `prev`, where has_prev). base + 64 must not exceed 2^32 - 1.
ATOLL_AVX512 inline int coo_take(const std::uint8_t* keys, const std::uint8_t* vals,
                                 std::uint32_t base, unsigned lanes, bool has_prev,
                                 std::uint32_t prev, std::uint32_t* oi, float* ov) {
  const __m512i x = _mm512_loadu_si512(keys);
  const auto valid = static_cast<__mmask16>(lanes >= 16 ? 0xFFFFu : (1u << lanes) - 1);
  const auto in = static_cast<unsigned>(
      _mm512_mask_cmplt_epu32_mask(valid, x, _mm512_set1_epi32(static_cast<int>(base + 64))));
  const int n = __builtin_ctz(~in);  // the leading lanes inside the granule (in < 2^16)
  if (n == 0) return 0;
  const auto taken = static_cast<__mmask16>((1u << n) - 1);
  // Lane i against lane i - 1, lane 0 against prev.
  const __m512i before =
      _mm512_maskz_alignr_epi32(0xFFFF, x, _mm512_set1_epi32(static_cast<int>(prev)), 15);
  auto increasing = static_cast<unsigned>(_mm512_mask_cmpgt_epu32_mask(taken, x, before));
  if (!has_prev) increasing |= 1u;
  const auto at_least_base = static_cast<unsigned>(
      _mm512_mask_cmpge_epu32_mask(taken, x, _mm512_set1_epi32(static_cast<int>(base))));
  if ((increasing & taken) != taken || at_least_base != taken) return -1;
  _mm512_storeu_si512(oi, x);
  _mm512_storeu_ps(ov, _mm512_loadu_ps(vals));
  return n;
}

// Sixteen entries folded (sync/entry_fold.h's entry_term): indices i (their low 32 bits), value
// bits x; lanes outside `valid` and ±0 values skipped. acc holds eight 64-bit partial sums.
ATOLL_AVX512 inline void fold_sixteen(__m512i i, __m512i x, __mmask16 valid, __m512i& acc,
                                      std::uint64_t& count) {
  const __mmask16 nz = _mm512_mask_test_epi32_mask(valid, x, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i a = _mm512_maskz_xor_epi32(nz, i, x);  // 0 where skipped: a zero term
  const __m512i b = _mm512_or_si512(i, _mm512_set1_epi32(1));
  // (maskz forms: the unmasked ones read an "undefined" vector GCC 12 warns about)
  acc = _mm512_add_epi64(acc, _mm512_maskz_mul_epu32(0xFF, a, b));
  acc = _mm512_add_epi64(acc, _mm512_maskz_mul_epu32(0xFF, _mm512_maskz_srli_epi64(0xFF, a, 32),
                                                     _mm512_maskz_srli_epi64(0xFF, b, 32)));
  count += static_cast<std::uint64_t>(__builtin_popcount(nz));
}

// The sum of a vector's eight 64-bit lanes, mod 2^64.
ATOLL_AVX512 inline std::uint64_t lanes_sum(__m512i v) {
  alignas(64) std::uint64_t lane[8];
  _mm512_store_si512(lane, v);
  std::uint64_t s = 0;
  for (const std::uint64_t x : lane) s += x;
  return s;
}

}  // namespace atl::sync::zen_wide
#endif
