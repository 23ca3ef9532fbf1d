// Zen and its COO-pull variant share one implementation (src/sync/zen.cpp).
#pragma once

#include <memory>
#include <string>

#include "atoll/sync/scheme.h"

namespace atl::sync {

// pull_bitmap: let each server choose the hash bitmap when smaller than COO (zen); false: always
// COO (zen_coo).
std::unique_ptr<SyncScheme> make_zen_variant(const SchemeOptions& options, std::string name,
                                             bool pull_bitmap);

}  // namespace atl::sync
