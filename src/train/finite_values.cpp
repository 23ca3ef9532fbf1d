#include "finite_values.h"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace atl::train {
namespace {
constexpr std::uint32_t kExponent = 0x7f800000u;
// Values per block: the inner loops have this fixed trip count and restrict pointers, so that GCC
// vectorises them at -O2 (its very-cheap cost model refuses a loop that needs a scalar epilogue
// or a runtime alias check; the plain loops over n values stayed scalar: 1.4 ms for the dense
// gradients of `small` in a step, about 1.2 ns per value).
constexpr std::size_t kBlock = 64;

// 1 when v's exponent bits are all ones (NaN or ±inf): an integer test that vectorises where
// std::isfinite does not.
inline std::uint32_t nonfinite_bit(float v) {
  return static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & kExponent) == kExponent);
}

inline std::uint32_t block_nonfinite(const float* __restrict v) {
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < kBlock; ++i) any |= nonfinite_bit(v[i]);
  return any;
}

inline std::uint32_t copy_block_nonfinite(const float* __restrict src, float* __restrict dst) {
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    dst[i] = src[i];
    any |= nonfinite_bit(src[i]);
  }
  return any;
}
}  // namespace

bool all_finite(std::span<const float> values) {
  const std::size_t n = values.size(), whole = n - n % kBlock;
  const float* v = values.data();
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < whole; i += kBlock) any |= block_nonfinite(v + i);
  for (std::size_t i = whole; i < n; ++i) any |= nonfinite_bit(v[i]);
  return any == 0;
}

bool copy_all_finite(std::span<const float> src, float* dst) {
  const std::size_t n = src.size(), whole = n - n % kBlock;
  const float* s = src.data();
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < whole; i += kBlock) any |= copy_block_nonfinite(s + i, dst + i);
  for (std::size_t i = whole; i < n; ++i) {
    dst[i] = s[i];
    any |= nonfinite_bit(s[i]);
  }
  return any == 0;
}

}  // namespace atl::train
