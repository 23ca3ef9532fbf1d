// The checkpoint container (magic, step, payload size, checksum; src/train/checkpoint_container.h).
// LibTorch's archive inside is out of scope. The fuzz build skips the checksum comparison
// (ATOLL_FUZZ_SKIP_CHECKSUMS) so inputs reach the size checks and the payload view.
#include <numeric>

#include "../src/train/checkpoint_container.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto c = atl::train::parse_checkpoint_container({data, size}, "fuzz.ckpt");
    // Touch every payload byte: the view must lie inside the input.
    volatile unsigned sum = std::accumulate(c.payload.begin(), c.payload.end(), 0u);
    (void)sum;
  } catch (const atl::train::CheckpointError&) {
  }
  return 0;
}
