// Zen's pull layout: granule bounds and buckets, the block format each server's coding picks and
// its size, and the balanced chunks of a pipelined pull (zen_partition.h).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "atoll/sync/zen_partition.h"
#include "zen_blocks.h"

namespace atl::sync {

using zen_blocks::format_key_bytes;
using zen_blocks::kBitmap;
using zen_blocks::kBlockHeader;
using zen_blocks::kCoo;
using zen_blocks::kEliasFano;
using zen_blocks::kEliasFanoComplement;

std::vector<std::uint64_t> zen_granule_bounds(std::uint64_t elements, std::uint32_t parts) {
  if (parts == 0) throw std::invalid_argument("zen_granule_bounds: parts must be positive");
  const std::uint64_t granules = (elements + kZenGranule - 1) / kZenGranule;
  std::vector<std::uint64_t> bounds(parts + 1);
  for (std::uint32_t p = 0; p <= parts; ++p) bounds[p] = granules * p / parts;
  return bounds;
}

std::uint32_t zen_pull_buckets(std::uint64_t elements) {
  const std::uint64_t granules = (elements + kZenGranule - 1) / kZenGranule;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(granules / 64, 1, 256));
}

std::uint8_t zen_pull_format(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                             PullCoding coding) {
  const std::size_t coo = format_key_bytes(kCoo, slots, nnz, index_bytes);
  const std::size_t bitmap = format_key_bytes(kBitmap, slots, nnz, index_bytes);
  switch (coding) {
    case PullCoding::coo:
      return kCoo;
    case PullCoding::bitmap_or_coo:
      return coo * kZenCooKeyShare <= bitmap ? kCoo : kBitmap;
    case PullCoding::bitmap_or_coo_smaller:
      return coo <= bitmap ? kCoo : kBitmap;
    case PullCoding::smallest: {
      // Ties go to the format that decodes faster: bitmap, indices, then Elias-Fano.
      const std::size_t ef = format_key_bytes(kEliasFano, slots, nnz, index_bytes);
      const std::size_t efc = format_key_bytes(kEliasFanoComplement, slots, nnz, index_bytes);
      const std::size_t least = std::min({bitmap, coo, ef, efc});
      if (bitmap == least) return kBitmap;
      if (coo == least) return kCoo;
      return ef == least ? kEliasFano : kEliasFanoComplement;
    }
    case PullCoding::elias_fano:
      return kEliasFano;
    case PullCoding::elias_fano_complement:
      return kEliasFanoComplement;
  }
  throw std::invalid_argument("zen: unknown pull coding");
}

std::size_t zen_pull_key_bytes(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                               PullCoding coding) {
  return format_key_bytes(zen_pull_format(slots, nnz, index_bytes, coding), slots, nnz,
                          index_bytes);
}

std::size_t zen_pull_block_bytes(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                                 PullCoding coding) {
  return kBlockHeader + zen_pull_key_bytes(slots, nnz, index_bytes, coding) + nnz * sizeof(float);
}

std::size_t zen_pull_block_bound(std::size_t slots, std::size_t index_bytes) {
  // Elias-Fano of k of U positions takes k·(L + 1) + U / 2^L bits with L = floor(log2(U / k)),
  // so k <= U / 2^L gives at most U·(L + 2) / 2^L <= 2U bits, U / 4 bytes, plus its padding (of
  // the empty slots alike); the bitmap is U / 8 bytes, the indices k·index_bytes.
  return kBlockHeader + slots * index_bytes + slots / 8 + 64 + slots * sizeof(float);
}

bool zen_exchanges_without_counts(std::uint64_t elements, std::uint32_t servers,
                                  std::size_t index_bytes, std::uint64_t min_block_bytes) {
  if (min_block_bytes == 0 || servers == 0) return false;
  // The bound is affine in the slots, and the servers' slots are the granules' (each granule has
  // one owner): the sum of the servers' bounds.
  const std::uint64_t slots = (elements + kZenGranule - 1) / kZenGranule * kZenGranule;
  const double total = static_cast<double>(zen_pull_block_bound(slots, index_bytes)) +
                       static_cast<double>(servers - 1) * zen_pull_block_bound(0, index_bytes);
  return total <= static_cast<double>(servers) * static_cast<double>(min_block_bytes);
}

namespace {

// The pull's bytes per bucket as the chunking weighs them: 8 bytes of bitmap per granule, 4 per
// non-zero value of every server; refuses counts that do not match the buckets and servers.
std::vector<double> pull_bucket_weights(const HashLayout& layout,
                                        std::span<const std::uint64_t> bucket_bounds,
                                        std::span<const std::uint64_t> bucket_nnz,
                                        std::uint32_t chunks, const char* caller) {
  if (bucket_bounds.size() < 2 || chunks == 0 ||
      bucket_nnz.size() != (bucket_bounds.size() - 1) * layout.servers()) {
    throw std::invalid_argument(
        fmt::format("{}: {} bucket bounds, {} counts for {} servers, {} chunks", caller,
                    bucket_bounds.size(), bucket_nnz.size(), layout.servers(), chunks));
  }
  const std::size_t H = bucket_bounds.size() - 1;
  std::vector<double> weight(H);
  for (std::size_t b = 0; b < H; ++b) {
    double w = 8.0 * static_cast<double>(bucket_bounds[b + 1] - bucket_bounds[b]);
    for (std::uint32_t j = 0; j < layout.servers(); ++j)
      w += 4.0 * static_cast<double>(bucket_nnz[j * H + b]);
    weight[b] = w;
  }
  return weight;
}

// As many chunks as keep total / (servers x chunks) >= min_block_bytes, 1 to max_chunks.
}  // namespace

std::uint32_t zen_pull_chunks_for(double total, std::uint32_t servers, std::uint32_t max_chunks,
                                  std::uint64_t min_block_bytes) {
  if (min_block_bytes == 0) return max_chunks;
  const double fit = total / (static_cast<double>(servers) * static_cast<double>(min_block_bytes));
  if (fit < 1) return 1;
  return fit >= max_chunks ? max_chunks : static_cast<std::uint32_t>(fit);
}

std::uint64_t zen_pull_min_block(std::uint64_t configured, double latency_s,
                                 double bandwidth_bytes_per_s, std::uint32_t servers) {
  if (configured == 0 || servers < 2) return configured;
  // A rank receives servers − 1 blocks of a chunk through its link.
  const double bdp = latency_s * bandwidth_bytes_per_s / (servers - 1.0);
  return bdp > static_cast<double>(configured) ? static_cast<std::uint64_t>(bdp) : configured;
}

std::vector<std::uint64_t> zen_balanced_chunks(const HashLayout& layout,
                                               std::span<const std::uint64_t> bucket_bounds,
                                               std::span<const std::uint64_t> bucket_nnz,
                                               std::uint32_t max_chunks,
                                               std::uint64_t min_block_bytes) {
  const auto weight =
      pull_bucket_weights(layout, bucket_bounds, bucket_nnz, max_chunks, "zen_balanced_chunks");
  const std::size_t H = weight.size();
  double total = 0;
  for (const double w : weight) total += w;
  const std::uint32_t chunks =
      zen_pull_chunks_for(total, layout.servers(), max_chunks, min_block_bytes);
  std::vector<std::uint64_t> bounds{bucket_bounds[0]};
  double acc = 0;
  std::uint32_t next = 1;
  for (std::size_t b = 0; b < H; ++b) {
    acc += weight[b];
    if (next < chunks && b + 1 < H && acc >= total * next / chunks) {
      bounds.push_back(bucket_bounds[b + 1]);
      while (next < chunks && acc >= total * next / chunks) ++next;
    }
  }
  bounds.push_back(bucket_bounds[H]);
  return bounds;
}

std::uint32_t zen_pull_chunk_count(const HashLayout& layout,
                                   std::span<const std::uint64_t> bucket_bounds,
                                   std::span<const std::uint64_t> bucket_nnz,
                                   std::uint32_t max_chunks, std::uint64_t min_block_bytes) {
  const auto weight =
      pull_bucket_weights(layout, bucket_bounds, bucket_nnz, max_chunks, "zen_pull_chunk_count");
  double total = 0;
  for (const double w : weight) total += w;
  return zen_pull_chunks_for(total, layout.servers(), max_chunks, min_block_bytes);
}

}  // namespace atl::sync
