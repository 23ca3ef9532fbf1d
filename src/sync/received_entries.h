// Checks of COO entries received from peers (push blocks of Zen and the sparse parameter server,
// the sparse PS pull, AGsparse's allgather), before any of them indexes a buffer. Pure functions
// on arrays, no communicator: tests and the fuzz targets (fuzz/) call them without MPI.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "atoll/sync/scheme.h"
#include "common.h"

namespace atl::sync {

// `entries` is the concatenation of the senders' blocks, counts[j] entries from rank j. Throws
// MalformedMessage naming `what` (e.g. "zen push") and the sender when the counts do not add up
// to entries.size(), or when an entry of sender j fails accept(j, index); by `order`, also when
// an index is not greater than the one before it within its sender's block or across senders too.
enum class EntryOrder : std::uint8_t { any, per_sender, overall };
template <class Index, class Accept>
void check_received_entries(std::string_view what, std::span<const sparse::Entry<Index>> entries,
                            std::span<const std::size_t> counts, Accept accept,
                            EntryOrder order = EntryOrder::any) {
  std::size_t total = 0;
  for (const auto c : counts) {
    if (c > entries.size() - total) {
      throw MalformedMessage(fmt::format("{}: senders announced more than the {} entries received",
                                         what, entries.size()));
    }
    total += c;
  }
  if (total != entries.size()) {
    throw MalformedMessage(
        fmt::format("{}: senders announced {} entries, {} received", what, total, entries.size()));
  }
  std::size_t k = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    const std::size_t first = order == EntryOrder::per_sender ? k : 0;
    for (const std::size_t end = k + counts[j]; k < end; ++k) {
      const Index x = entries[k].index;
      if (!accept(j, x)) {
        throw MalformedMessage(fmt::format(
            "{}: malformed message from rank {}: entry {} has index {}, not one this rank accepts "
            "from it",
            what, j, k, static_cast<std::uint64_t>(x)));
      }
      if (order != EntryOrder::any && k > first && x <= entries[k - 1].index) {
        throw MalformedMessage(fmt::format(
            "{}: malformed message from rank {}: index {} at entry {} is not above the previous",
            what, j, static_cast<std::uint64_t>(x), k));
      }
    }
  }
}

// Server `rank` accepts pushed indices of its own range only.
template <class Index>
void sparse_ps_check_push(std::uint64_t M, std::uint32_t n, std::uint32_t rank,
                          std::span<const sparse::Entry<Index>> received,
                          std::span<const std::size_t> counts) {
  const std::uint64_t first = range_begin(M, n, rank), end = range_begin(M, n, rank + 1);
  check_received_entries<Index>("sparse_ps push", received, counts,
                                [&](std::size_t, Index x) { return x >= first && x < end; });
}

// Server j's summed entries: its own range, strictly increasing.
template <class Index>
void sparse_ps_check_pull(std::uint64_t M, std::span<const sparse::Entry<Index>> all,
                          std::span<const std::size_t> counts) {
  const auto n = static_cast<std::uint32_t>(counts.size());
  check_received_entries<Index>(
      "sparse_ps pull", all, counts,
      [&](std::size_t j, Index x) {
        const auto r = static_cast<std::uint32_t>(j);
        return x >= range_begin(M, n, r) && x < range_begin(M, n, r + 1);
      },
      EntryOrder::overall);
}

// AGsparse: any rank's entries, indices below M.
template <class Index>
void agsparse_check_entries(std::uint64_t M, std::span<const sparse::Entry<Index>> all,
                            std::span<const std::size_t> counts) {
  check_received_entries<Index>("agsparse", all, counts,
                                [&](std::size_t, Index x) { return x < M; });
}

}  // namespace atl::sync
