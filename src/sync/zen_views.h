// Zen's pull, receiver side: one chunk's received blocks checked and viewed in place (shared by
// the decoder, zen_decode.cpp, and the in-place fold, zen_fold.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"

namespace atl::sync::zen_views {

// A block from server j that does not decode, naming the server.
MalformedMessage malformed(std::uint32_t j, const std::string& what);

// One server's block of a chunk: a bitmap over its slots in the chunk (format kBitmap; an
// Elias-Fano block is viewed as the bitmap it decodes to) or its sorted indices (kCoo), then its
// nnz values.
struct View {
  std::uint8_t format;
  std::uint64_t nnz;
  const std::uint8_t* keys;  // bitmap words or indices
  const std::uint8_t* values;
};

// One chunk's blocks, each checked against its announced size. Elias-Fano blocks are decoded into
// bitmap words over their slots first (those of the empty slots' code, then inverted), then walked
// as bitmaps. (Owned here, not thread_local:
// under SMPI every simulated rank may share one thread, and the walk's progress calls can switch
// ranks while these words are in use.)
struct ChunkViews {
  std::vector<View> views;
  std::vector<std::vector<std::uint64_t>> ef_words;
  std::uint64_t total = 0;
};

// The chunk of granules [granule_begin, granule_end): the blocks end to end in `blocks`, server
// order[k]'s k-th (order empty: server k's), counts[j] bytes each; every block checked against its
// announced size and format (MalformedMessage naming the server).
ChunkViews parse_views(const HashLayout& layout, std::uint64_t granule_begin,
                       std::uint64_t granule_end, std::span<const std::uint8_t> blocks,
                       std::span<const std::size_t> counts, std::size_t index_bytes,
                       std::span<const std::uint32_t> order);

}  // namespace atl::sync::zen_views
