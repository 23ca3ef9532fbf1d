// The checked container around a checkpoint's LibTorch archive (format: checkpoint.h). Torch-free,
// so tests and fuzz/checkpoint.cpp parse it without linking LibTorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <vector>

namespace atl::train {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckpointContainer {
  std::uint64_t step = 0;
  std::span<const std::uint8_t> payload;  // a view into the bytes parsed
};

std::vector<std::uint8_t> encode_checkpoint_container(std::uint64_t step,
                                                      std::span<const std::uint8_t> payload);

// Checks magic, size and checksum; CheckpointError naming `file`, the byte offset and the problem.
// A fuzz build (ATOLL_FUZZ_SKIP_CHECKSUMS) skips the checksum comparison only.
CheckpointContainer parse_checkpoint_container(std::span<const std::uint8_t> bytes,
                                               const std::filesystem::path& file);

}  // namespace atl::train
