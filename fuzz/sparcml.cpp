// SparCML's receive step: a peer's message decoded (sparcml_decode) and added to this rank's own
// accumulator (sparse, or dense with flags bit 1), as in a recursive-doubling round; also the
// fold's announced size (the first 8 payload bytes through sparcml_checked_size). Input:
// fuzz_input.h (counts unused), payload = one message.
#include <cstring>

#include "../src/sync/sparcml_message.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const std::uint64_t M = in.elements;
  SparcmlAccumulator<Index> mine;
  for (std::uint64_t x = in.seed % 7; x < M; x += 7 + in.extra) {  // a valid sparse gradient
    mine.idx.push_back(static_cast<Index>(x));
    mine.val.push_back(1.0f);
  }
  if (in.flags & 2) {
    mine.idx.clear();
    mine.val.assign(M, 1.0f);
    mine.dense = true;
  }
  try {
    if (in.payload.size() >= 8) {
      std::uint64_t size;
      std::memcpy(&size, in.payload.data(), 8);
      sparcml_checked_size<Index>(size, M, 1);
    }
    auto theirs = sparcml_decode<Index>(in.payload, M, 1);
    sparcml_accumulate(mine, std::move(theirs), M, (in.flags & 4) ? 0.0 : 0.5);
  } catch (const MalformedMessage&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
