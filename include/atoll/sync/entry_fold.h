// What a consumer of a synchronization's result costs (bench sync --consume; issue 18 item 2):
// every non-zero (index, value) read once, in any order, each pair folded into a 64-bit sum with
// work of its own (a product of the index and the value's bits, as an optimizer pairs each value
// with its parameter), so that no form of the result is read for less than its entries. Zen's
// pull can fold its blocks where they arrived (SchemeOptions::fold_in_place) instead of decoding
// them into one sorted array first; the other forms are folded after the call.
//
// The fold of a result is the same whichever form holds it (sorted COO, dense, blocks in views,
// Zen's bitmap and COO pull blocks): entries whose value is +0 or -0 are skipped, as absent
// entries are. Equal sums (bit for bit) give equal folds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "atoll/sync/scheme.h"

namespace atl::sync {

// (EntryFold, the fold's value, is in scheme.h, beside the SyncResult that can carry one.)

// One entry's term: (index ^ bits) · (index | 1), each factor's low 32 bits, as a 64-bit product.
inline std::uint64_t entry_term(std::uint64_t index, std::uint32_t value_bits) {
  const auto i = static_cast<std::uint32_t>(index);
  return static_cast<std::uint64_t>(i ^ value_bits) * static_cast<std::uint64_t>(i | 1u);
}

// n entries: indices idx[k] (any order) and their values.
template <class Index>
EntryFold fold_entries(const Index* idx, const float* val, std::size_t n);
// n values of consecutive indices first, first + 1, ...
EntryFold fold_dense(const float* val, std::size_t n, std::uint64_t first);

// The whole result, in whatever form it is (dense, sorted, in views, of rows); a result folded in
// place (SyncResult::folded) gives that fold.
template <class Index>
EntryFold fold_result(const SyncResult<Index>& r);

}  // namespace atl::sync
