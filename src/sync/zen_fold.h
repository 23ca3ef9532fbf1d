// Zen's pull folded where it arrived (SchemeOptions::fold_in_place; entry_fold.h): every server's
// block of one chunk read once in place and each non-zero (index, value) folded, with the
// decoder's checks, and no sorted result written.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"

namespace atl::sync {

// The chunk of granules [granule_begin, granule_end), its blocks as zen_decode_pull_chunk takes
// them (order: the servers' order in `blocks`, empty for 0..n-1). A block that does not decode
// (a bit past M or a count that does not match its values, COO indices unsorted, repeated or not
// the server's) throws MalformedMessage naming its server. progress, where set, is called between
// servers' blocks (a non-blocking exchange's progress).
template <class Index>
EntryFold zen_fold_pull_chunk(const HashLayout& layout, std::uint64_t granule_begin,
                              std::uint64_t granule_end, std::span<const std::uint8_t> blocks,
                              std::span<const std::size_t> counts,
                              const std::function<void()>& progress = {},
                              std::span<const std::uint32_t> order = {});

}  // namespace atl::sync
