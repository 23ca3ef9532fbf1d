// The grouped push's sum of sorted blocks (zen_groups.h): no communicator, so tests call it alone.
#pragma once

#include <span>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::sync {

using sparse::Entry;

// Sums sorted blocks of entries into `out` (appended): sorted, one entry per index (for runs that
// each hold an index at most once), equal indices added pairwise (run 0 + run 1, run 2 + run 3,
// then those sums, ...). `tmp` is scratch. Pure: tests call it without MPI.
template <class Index>
void zen_merge_sum(std::span<const std::span<const Entry<Index>>> runs,
                   std::vector<Entry<Index>>& out, std::vector<Entry<Index>>& tmp);

}  // namespace atl::sync
