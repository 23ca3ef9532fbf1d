// Zen's pull blocks, server side (zen_partition.h, step 2 of the pull): a server's summed slots
// encoded as bitmap, COO or Elias-Fano blocks; the non-zero sums are already in slot order
// (zen_aggregate), so a block's values are one copy.
#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "atoll/sparse/elias_fano.h"
#include "atoll/sync/zen_partition.h"
#include "zen_blocks.h"

namespace atl::sync {

using zen_blocks::format_key_bytes;
using zen_blocks::kBitmap;
using zen_blocks::kBlockHeader;
using zen_blocks::kCoo;
using zen_blocks::kEliasFano;
using zen_blocks::kEliasFanoComplement;

namespace {
// The Elias-Fano code of the non-zero slots of [s0, s1) (positions relative to s0) into `keys`;
// with `empty`, of its empty slots (format kEliasFanoComplement). The non-zero bitmap exists in
// both of the server's forms (slot buffer and sorted entries).
template <class Index>
void encode_elias_fano(const ZenServerSums<Index>& sums, std::size_t s0, std::size_t s1, bool empty,
                       std::uint8_t* keys, std::size_t key_bytes) {
  std::vector<std::uint8_t> code;
  sparse::elias_fano_encode_words(
      std::span<const std::uint64_t>(sums.words.data() + s0 / kZenGranule, (s1 - s0) / kZenGranule),
      s1 - s0, empty, code);
  if (code.size() != key_bytes)
    throw std::logic_error("zen: Elias-Fano code of an unexpected size");
  if (key_bytes > 0) std::memcpy(keys, code.data(), key_bytes);
}
// The indices of the non-zero slots of words [wa, wb) into `keys` from entry k on, in slot order.
template <class Index>
void coo_keys(const HashLayout& layout, std::uint32_t server, const ZenServerSums<Index>& sums,
              std::uint8_t* keys, std::size_t wa, std::size_t wb, std::size_t k) {
  for (std::size_t w = wa; w < wb; ++w) {
    const std::size_t base = w * kZenGranule;
    for (std::uint64_t word = sums.words[w]; word; word &= word - 1, ++k) {
      const auto x = static_cast<Index>(
          layout.index_of(server, base + static_cast<std::size_t>(std::countr_zero(word))));
      std::memcpy(keys + k * sizeof(Index), &x, sizeof(Index));
    }
  }
}
}  // namespace

template <class Index>
std::size_t zen_encode_pull_chunk(const HashLayout& layout, std::uint32_t server,
                                  const ZenServerSums<Index>& sums, std::size_t s0, std::size_t s1,
                                  PullCoding coding, std::vector<std::uint8_t>& block,
                                  unsigned parts, const ParallelTasks& parallel) {
  const std::size_t w0 = s0 / kZenGranule, w1 = s1 / kZenGranule;
  const std::uint64_t e0 = sums.nnz_before[w0];
  const std::uint64_t nnz = sums.nnz_before[w1] - e0;
  const std::size_t at = block.size();
  const std::uint8_t format = zen_pull_format(s1 - s0, nnz, sizeof(Index), coding);
  const std::size_t key_bytes = format_key_bytes(format, s1 - s0, nnz, sizeof(Index));
  block.resize(at + kBlockHeader + key_bytes + nnz * sizeof(float));
  std::uint8_t* out = block.data() + at;
  out[0] = format;
  std::memcpy(out + 1, &nnz, 8);
  std::uint8_t* keys = out + kBlockHeader;
  std::uint8_t* values = keys + key_bytes;
  // (key_bytes is 0 for a server with no slots in this chunk, whose words may have no storage;
  // an empty server's vectors may have no storage, and memcpy from null is undefined even for 0
  // bytes: found by fuzz/zen_push.cpp.)
  if (format == kBitmap && key_bytes > 0) std::memcpy(keys, sums.words.data() + w0, key_bytes);
  if (format == kEliasFano || format == kEliasFanoComplement)
    encode_elias_fano(sums, s0, s1, format == kEliasFanoComplement, keys, key_bytes);
  // The non-zero sums are in slot order in either form (zen_aggregate): one copy.
  if (nnz > 0) std::memcpy(values, sums.nonzero_values().data() + e0, nnz * sizeof(float));
  if (format == kCoo && nnz > 0) {
    if (sums.sparse) {
      std::memcpy(keys, sums.idx.data() + e0, key_bytes);
    } else if (parts <= 1 || w1 - w0 < 2 * parts) {
      coo_keys<Index>(layout, server, sums, keys, w0, w1, 0);
    } else {
      // Task t writes the keys of words [a_t, a_t+1); its first entry is known from the prefix
      // counts.
      const auto task = [&](std::size_t t) {
        const std::size_t a = w0 + (w1 - w0) * t / parts, b = w0 + (w1 - w0) * (t + 1) / parts;
        coo_keys<Index>(layout, server, sums, keys, a, b, sums.nnz_before[a] - e0);
      };
      if (parallel)
        parallel(parts, task);
      else
        for (std::size_t t = 0; t < parts; ++t) task(t);
    }
  }
  return block.size() - at;
}

template <class Index>
void zen_encode_pull_block(const HashLayout& layout, std::uint32_t server,
                           std::vector<sparse::Entry<Index>>& received, PullCoding coding,
                           std::vector<std::uint8_t>& block) {
  const auto bounds = zen_granule_bounds(layout.elements(), 1);
  ZenServerSums<Index> sums;
  zen_aggregate(layout, server, received, bounds, sums);
  block.clear();
  zen_encode_pull_chunk(layout, server, sums, 0, layout.slot_count(server), coding, block);
}

#define ATOLL_ZEN_ENCODE_INSTANTIATE(I)                                                    \
  template std::size_t zen_encode_pull_chunk(                                              \
      const HashLayout&, std::uint32_t, const ZenServerSums<I>&, std::size_t, std::size_t, \
      PullCoding, std::vector<std::uint8_t>&, unsigned, const ParallelTasks&);             \
  template void zen_encode_pull_block(const HashLayout&, std::uint32_t,                    \
                                      std::vector<sparse::Entry<I>>&, PullCoding,          \
                                      std::vector<std::uint8_t>&);
ATOLL_ZEN_ENCODE_INSTANTIATE(std::uint32_t)
ATOLL_ZEN_ENCODE_INSTANTIATE(std::uint64_t)
#undef ATOLL_ZEN_ENCODE_INSTANTIATE

}  // namespace atl::sync
