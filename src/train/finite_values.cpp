#include "finite_values.h"

#include <bit>
#include <cstdint>

namespace atl::train {
namespace {
constexpr std::uint32_t kExponent = 0x7f800000u;

// 1 when v's exponent bits are all ones (NaN or ±inf): an integer test that vectorises where
// std::isfinite does not.
inline std::uint32_t nonfinite_bit(float v) {
  return static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & kExponent) == kExponent);
}
}  // namespace

bool all_finite(std::span<const float> values) {
  std::uint32_t any = 0;
  for (float v : values) any |= nonfinite_bit(v);
  return any == 0;
}

bool copy_all_finite(std::span<const float> src, float* dst) {
  std::uint32_t any = 0;
  const std::size_t n = src.size();
  for (std::size_t i = 0; i < n; ++i) {
    const float v = src[i];
    dst[i] = v;
    any |= nonfinite_bit(v);
  }
  return any == 0;
}

}  // namespace atl::train
