// Gradient trace files (format: include/atoll/sparse/trace.h) read as 32- and 64-bit indices.
// The fuzz build skips the checksum comparison (ATOLL_FUZZ_SKIP_CHECKSUMS).
#include "atoll/sparse/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (int width : {4, 8}) {
    try {
      if (width == 4)
        atl::sparse::parse_trace<std::uint32_t>({data, size}, "fuzz.atg");
      else
        atl::sparse::parse_trace<std::uint64_t>({data, size}, "fuzz.atg");
    } catch (const atl::sparse::InvalidGradient&) {
    }
  }
  return 0;
}
