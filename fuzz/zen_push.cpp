// Zen's server side on received push blocks: the aggregation that checks them on its way (it must
// refuse exactly what zen_check_push refuses), then the encoding of the pull block. Input:
// fuzz_input.h, counts in entries, payload = (index, value) entries; the pull coding is
// (flags >> 1) % kPullCodings (PullCoding: 0 COO, 1 bitmap or COO, 2 smallest, 3 Elias-Fano, 4
// Elias-Fano of the empty slots), the aggregation's tasks 1 + flags % 3 (its sums must equal one
// pass's without the counts); extra bit 0 set aggregates without the senders' counts, after
// zen_check_push.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const HashLayout layout(in.elements, in.ranks, in.seed);
  auto received = atl::fuzz::items_of<atl::sparse::Entry<Index>>(in.payload);
  const auto refused = [](const auto& call) {
    try {
      call();
      return false;
    } catch (const MalformedMessage&) {
      return true;
    }
  };
  const bool checked_bad =
      refused([&] { zen_check_push<Index>(layout, in.rank, received, in.counts); });
  const auto buckets = zen_granule_bounds(in.elements, zen_pull_buckets(in.elements));
  ZenServerSums<Index> sums;
  if ((in.extra & 1u) == 0) {
    // As the scheme aggregates: with the senders' counts, on unchecked entries (the slots range by
    // range, the push checked on the way): it must refuse exactly what zen_check_push refuses.
    std::size_t total = 0;
    for (const auto c : in.counts) total += c;
    // The caller's counts describe the entries (the receive sized them), one per sender.
    if (in.counts.empty() || total != received.size()) return;
    const bool aggregated_bad = refused([&] {
      zen_aggregate<Index>(layout, in.rank, received, buckets, sums,
                           std::span<const std::size_t>(in.counts), 1 + in.flags % 3);
    });
    if (aggregated_bad != checked_bad) __builtin_trap();
    if (aggregated_bad) return;
    // On accepted blocks, the same sums as one pass without the counts, bit for bit.
    ZenServerSums<Index> one;
    zen_aggregate<Index>(layout, in.rank, received, buckets, one, std::span<const std::size_t>{});
    if (one.sparse != sums.sparse || one.words != sums.words || one.bucket_nnz != sums.bucket_nnz ||
        !std::ranges::equal(one.nonzero_values(), sums.nonzero_values(), [](float a, float b) {
          return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
        }))
      __builtin_trap();
  } else {
    // `extra` bit 0 set: without the counts (one pass), on entries zen_check_push accepted.
    if (checked_bad) return;
    zen_aggregate<Index>(layout, in.rank, received, buckets, sums, std::span<const std::size_t>{});
  }
  std::vector<std::uint8_t> block;
  zen_encode_pull_chunk<Index>(layout, in.rank, sums, 0, layout.slot_count(in.rank),
                               static_cast<PullCoding>((in.flags >> 1) % kPullCodings), block);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
