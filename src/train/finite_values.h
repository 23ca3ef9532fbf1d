// Finiteness of float buffers: a NaN or an infinity has all exponent bits set. Private to
// src/train (nonfinite.h uses these on gradients; FlatParams checks while it copies).
#pragma once

#include <span>

namespace atl::train {

// True when every value is finite.
bool all_finite(std::span<const float> values);
// Copies `src` to `dst` (src.size() floats) and returns whether every value was finite: one pass
// over the data instead of a copy and a check.
bool copy_all_finite(std::span<const float> src, float* dst);

}  // namespace atl::train
