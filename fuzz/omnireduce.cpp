// OmniReduce's received block records: the aggregator's push (flags bit 1 clear) or the workers'
// pull (set). Block size B = 1 + extra % 64. Input: fuzz_input.h, counts in bytes, payload =
// records [Index id][B floats].
#include "../src/sync/common.h"
#include "../src/sync/omnireduce_blocks.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const std::uint64_t M = in.elements, B = 1 + in.extra % 64;
  try {
    if (in.flags & 2) {
      std::vector<float> dense;
      omnireduce_decode_pull<Index>(in.payload, in.counts, M, B, dense);
      return;
    }
    const std::uint64_t blocks = (M + B - 1) / B;
    const std::uint64_t first = range_begin(blocks, in.ranks, in.rank);
    const std::uint64_t count = range_begin(blocks, in.ranks, in.rank + 1) - first;
    std::vector<float> sums;
    std::vector<std::uint8_t> present;
    omnireduce_aggregate<Index>(in.payload, in.counts, first, count, B, sums, present);
  } catch (const MalformedMessage&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
