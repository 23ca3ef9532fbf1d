// Checks a synchronization's result against the dense reference sum without making it dense.
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/sync/scheme.h"

namespace atl::sync {

struct Mismatches {
  std::uint64_t count = 0;      // elements outside the tolerance or NaN, and misplaced blocks
  std::uint64_t first = 0;      // the first such element's index
  float got = 0, expected = 0;  // its value in the result and in the reference (NaN: no element)
};

// Counts the elements where `result` differs from `reference` (M floats) by more than
// slack · magnitude[i], or is NaN, plus one for each block out of order, held twice or outside
// [0, M) (a result holds sorted unique indices, as a gradient does); a sparse result whose size
// M or value count does not match is wrong as a whole (count 1, nothing read). A sparse result is
// walked in index order against the reference, so the check needs no memory beside the two
// reference arrays, rather than another M floats for the result made dense: what lets `bench sync
// --verify` run hundreds of simulated ranks in one process.
template <class Index>
Mismatches count_mismatches(const SyncResult<Index>& result, const std::vector<float>& reference,
                            const std::vector<float>& magnitude, float slack);

}  // namespace atl::sync
