// Zen's server side on received push blocks: zen_check_push, then aggregation and the encoding of
// the pull block (what the entries are written into). Input: fuzz_input.h, counts in entries,
// payload = (index, value) entries; the pull coding is (flags >> 1) % kPullCodings (PullCoding: 0
// COO, 1 bitmap or COO, 2 smallest, 3 Elias-Fano, 4 Elias-Fano of the empty slots); extra bit 0
// set aggregates without the senders' counts.
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const HashLayout layout(in.elements, in.ranks, in.seed);
  auto received = atl::fuzz::items_of<atl::sparse::Entry<Index>>(in.payload);
  try {
    zen_check_push<Index>(layout, in.rank, received, in.counts);
  } catch (const MalformedMessage&) {
    return;
  }
  const auto buckets = zen_granule_bounds(in.elements, zen_pull_buckets(in.elements));
  ZenServerSums<Index> sums;
  // As the scheme aggregates: with the senders' counts (the slots range by range) where the check
  // passed; `extra` bit 0 set: without them (one pass), as tests and benchmarks may.
  const bool with_counts = (in.extra & 1u) == 0;
  zen_aggregate<Index>(
      layout, in.rank, received, buckets, sums,
      with_counts ? std::span<const std::size_t>(in.counts) : std::span<const std::size_t>{});
  std::vector<std::uint8_t> block;
  zen_encode_pull_chunk<Index>(layout, in.rank, sums, 0, layout.slot_count(in.rank),
                               static_cast<PullCoding>((in.flags >> 1) % kPullCodings), block);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
