// AVX-512 forms of Zen's per-word kernels (bitmap words of 64 slots), for functions compiled with
// ATOLL_AVX512 and called only where util::avx512_kernels() (one binary for every x86-64-v2 CPU).
// The portable forms stay beside their callers (zen_decode.cpp, zen_partition.cpp).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define ATOLL_HAVE_AVX512_KERNELS 1
#include <immintrin.h>

#include <cstdint>

#define ATOLL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt")))

namespace atl::sync::zen_wide {

// Bit p set iff v[p] != 0 (NaN counts as non-zero, -0.0 as zero: as the SSE compare does).
ATOLL_AVX512 inline std::uint64_t nonzero_mask64(const float* v) {
  const __m512 zero = _mm512_setzero_ps();
  std::uint64_t word = 0;
  for (int q = 0; q < 4; ++q) {
    const auto m = _mm512_cmp_ps_mask(_mm512_loadu_ps(v + 16 * q), zero, _CMP_NEQ_UQ);
    word |= static_cast<std::uint64_t>(m) << (16 * q);
  }
  return word;
}

// The values of a word's set slots (v: the word's 64 slot values), in slot order, to out: one
// compress per 16 slots. Writes up to 16 floats past the word's bit count.
ATOLL_AVX512 inline void gather_word(std::uint64_t word, const float* v, float* out) {
  for (int q = 0; q < 4; ++q) {
    const auto m = static_cast<__mmask16>(word >> (16 * q));
    _mm512_storeu_ps(out, _mm512_maskz_compress_ps(m, _mm512_loadu_ps(v + 16 * q)));
    out += __builtin_popcount(m);
  }
}

// A word's entries: the indices base + p of its set bits p (one byte compress gives the p, widened
// 16 at a time) and its `count` values copied from vals (in slot order), 16 at a time. Writes up
// to 15 entries past `count` at oi and ov; reads up to 15 values past vals + count.
ATOLL_AVX512 inline void emit_word(std::uint64_t word, std::uint32_t base, const std::uint8_t* vals,
                                   std::uint64_t count, std::uint32_t* oi, float* ov) {
  alignas(64) static constexpr std::uint8_t kBits[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  alignas(64) std::uint8_t bits[64];
  _mm512_store_si512(bits, _mm512_maskz_compress_epi8(word, _mm512_load_si512(kBits)));
  const __m512i b = _mm512_set1_epi32(static_cast<int>(base));
  for (std::uint64_t done = 0; done < count; done += 16) {
    const __m128i sixteen = _mm_load_si128(reinterpret_cast<const __m128i*>(bits + done));
    // (maskz: the unmasked form reads an "undefined" vector GCC 12 warns about)
    _mm512_storeu_si512(oi + done,
                        _mm512_add_epi32(b, _mm512_maskz_cvtepu8_epi32(0xFFFF, sixteen)));
    _mm512_storeu_ps(ov + done, _mm512_loadu_ps(vals + done * sizeof(float)));
  }
}

}  // namespace atl::sync::zen_wide
#endif
