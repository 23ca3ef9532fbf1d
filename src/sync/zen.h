// Zen and its variants (COO pull, Elias-Fano pull) share one implementation (src/sync/zen.cpp).
#pragma once

#include <memory>
#include <string>

#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"

namespace atl::sync {

// coding: how servers code the indices of their pull blocks (zen_partition.h); options can
// restrict it (zen_allow_bitmap) or force Elias-Fano (zen_force_elias_fano, of the non-zero slots;
// zen_force_elias_fano_complement, of the empty ones).
std::unique_ptr<SyncScheme> make_zen_variant(const SchemeOptions& options, std::string name,
                                             PullCoding coding);

}  // namespace atl::sync
