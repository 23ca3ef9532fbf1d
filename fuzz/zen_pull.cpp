// Zen's receiver side: the pull blocks of every server (bitmap or COO, per block) decoded into one
// sorted gradient, over the whole index space or one chunk of it (flags bit 1; the chunk is the
// `extra`-th of the balanced chunks; flags bit 2: decoded in 2-5 parts, one after another, as
// worker threads would). Over the whole index space the same blocks are also folded in place
// (zen_fold.h, bench sync --consume): the fold must accept exactly what the decoder accepts, with
// the fold of the decoded result. Input: fuzz_input.h, counts in bytes, payload = blocks.
#include <optional>
#include <vector>

#include "../src/sync/zen_fold.h"
#include "atoll/sync/entry_fold.h"
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const HashLayout layout(in.elements, in.ranks, in.seed);
  try {
    if (!(in.flags & 2)) {
      std::optional<EntryFold> decoded, folded;
      try {
        atl::sparse::SparseGradient<Index> out;
        zen_decode_pull<Index>(layout, in.payload, in.counts, out);
        decoded = fold_entries(out.indices.data(), out.values.data(), out.nnz());
      } catch (const MalformedMessage&) {
      }
      try {
        const std::uint64_t granules = (in.elements + kZenGranule - 1) / kZenGranule;
        folded = zen_fold_pull_chunk<Index>(layout, 0, granules, in.payload, in.counts);
      } catch (const MalformedMessage&) {
      }
      if (decoded != folded) __builtin_trap();  // the two readers disagree
      return;
    }
    const auto bounds = zen_granule_bounds(in.elements, zen_pull_buckets(in.elements));
    const std::size_t chunk = in.extra % (bounds.size() - 1);
    const std::size_t capacity = in.elements;
    std::vector<Index> idx(capacity + kZenDecodeSlack);
    std::vector<float> val(capacity + kZenDecodeSlack);
    zen_decode_pull_chunk<Index>(layout, bounds[chunk], bounds[chunk + 1], in.payload, in.counts,
                                 idx.data(), val.data(), capacity, {},
                                 (in.flags & 4) ? 2 + in.extra / 16 % 4 : 1);
  } catch (const MalformedMessage&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
