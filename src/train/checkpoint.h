// Training checkpoints (LibTorch archives inside a checked container). Private to src/train.
//
// File: out/checkpoints/step-<8 digits>.ckpt, written atomically (util::write_file_atomic):
//   bytes 0-7   magic "ATLCKPT1"
//   bytes 8-15  step (u64, little endian): the number of completed optimizer steps
//   bytes 16-23 payload size P (u64)
//   bytes 24-.. payload: a torch::serialize archive (model, optimizers, shape)
//   last 8      FNV-1a 64 of everything before
// A truncated file (size differs from 32 + P) or a checksum mismatch is refused with an error
// naming the file; older checkpoints are kept (keep_checkpoints) so one of them can be used.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <vector>

namespace atl::train {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::filesystem::path checkpoint_dir(const std::filesystem::path& out);
std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::uint64_t step);
// Checkpoint files in out/checkpoints, oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& out);

// Serialises `archive` into the container and writes it atomically.
void write_checkpoint(const std::filesystem::path& file, std::uint64_t step,
                      torch::serialize::OutputArchive& archive);
// Verifies the container and loads the archive; returns the step. Throws CheckpointError.
std::uint64_t read_checkpoint(const std::filesystem::path& file,
                              torch::serialize::InputArchive& archive);

// Deletes all but the newest `keep` checkpoints.
void prune_checkpoints(const std::filesystem::path& out, int keep);

}  // namespace atl::train
