// Gradient traces: one file per rank per step, `DIR/step-SSSSSS.rank-RRRRR.atg`.
//
// Format (little-endian, version 1):
//   offset size  field
//   0      8     magic "ATOLLGRD"
//   8      4     version (1)
//   12     4     index_bytes (4 or 8)
//   16     8     elements M
//   24     8     nnz
//   32     4     rank
//   36     4     world size
//   40     8     step
//   48     nnz·index_bytes   indices (sorted, unique, < M)
//   ..     nnz·4             values (float32)
//   ..     8     FNV-1a 64 checksum of every byte before it
// Files are written to a temporary name and renamed, so a reader never sees a partial file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::sparse {

struct TraceHeader {
  std::uint32_t index_bytes = 4;
  std::uint64_t elements = 0;
  std::uint64_t nnz = 0;
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
  std::uint64_t step = 0;
};

std::filesystem::path trace_path(const std::filesystem::path& dir, std::uint64_t step, int rank);

template <class Index>
void write_trace(const std::filesystem::path& file, const SparseGradient<Index>& grad, int rank,
                 int world, std::uint64_t step);

// Reads and fully checks a trace (size, checksum, invariants). Throws InvalidGradient naming the
// file and the problem. A trace written with 32-bit indices can be read as 64-bit, not the reverse
// unless M fits.
template <class Index>
SparseGradient<Index> read_trace(const std::filesystem::path& file, TraceHeader* header = nullptr);
// The same checks on a trace already in memory (`file` names it in errors); read_trace reads the
// file and calls it. Errors name the file and the byte offset of the field at fault.
template <class Index>
SparseGradient<Index> parse_trace(std::span<const std::uint8_t> bytes,
                                  const std::filesystem::path& file, TraceHeader* header = nullptr);

// Steps present in a trace directory for `rank` (sorted).
std::vector<std::uint64_t> trace_steps(const std::filesystem::path& dir, int rank);

// Sorted steps as ranges for a message: "1-3, 7, 9-10" ("none" when empty).
std::string describe_steps(const std::vector<std::uint64_t>& steps);

}  // namespace atl::sparse
