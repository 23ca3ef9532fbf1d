// Zen's building blocks (Wang et al., OSDI'25, §4-5): the ownership function, the hash layout
// 𝕀_j, the hash partition of a local gradient, and the hash-bitmap pull blocks.
//
// Ownership is defined ONCE, here: zen_owner. Push, aggregation and the bitmap layout all call it,
// so they cannot disagree (the reference code's push used floor(M/n)·n and its layout M: server
// assignment differed unless n divided M).
//
// Granules: ownership is assigned to granules of kZenGranule = 64 consecutive indices (one bitmap
// word), not to single indices, by a hashed stratified assignment (zen_owner). A server's bitmap
// words are then words of the global presence bitmap, so a receiver decodes a pull block with one
// table read per 64 slots instead of one per non-zero (per-index hashing needs an M-entry index
// table streamed on every decode, which made the pull decode the largest cost of a step). Plain
// random hashing of 64-index granules is too coarse (push imbalance 1.14 on a 160k-non-zero Zipf
// gradient over 16 servers, measured); the stratified assignment brings it under 1.1
// (tests/unit/zen_partition_test.cpp). Tiny gradients can be less balanced; there latency dominates
// anyway.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::sync {

using sparse::SparseGradient;

inline constexpr std::uint64_t kZenGranule = 64;

// MurmurHash3's 64-bit finaliser of (x + seed·φ): a bijection of 64-bit words with full avalanche.
constexpr std::uint64_t zen_hash(std::uint64_t x, std::uint64_t seed) {
  std::uint64_t k = x + seed * 0x9e3779b97f4a7c15ull;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// The server that owns index idx among `servers`. Granules are taken in strata of `servers`
// consecutive granules; within a stratum, granule i goes to server (i + r) mod n, where the
// rotation r = h0(stratum) is scaled to [0, n) by multiply-shift. Every server owns exactly one
// granule per stratum, so a popularity that varies smoothly with the index (hot small ids) is split
// evenly, and the hashed rotation keeps patterns with period n from landing on one server.
constexpr std::uint32_t zen_owner(std::uint64_t idx, std::uint32_t servers, std::uint64_t seed) {
  const std::uint64_t granule = idx / kZenGranule;
  const std::uint64_t stratum = granule / servers;
  const auto within = static_cast<std::uint32_t>(granule - stratum * servers);
  const auto rotation = static_cast<std::uint32_t>(
      (static_cast<unsigned __int128>(zen_hash(stratum, seed) >> 32) * servers) >> 32);
  const std::uint32_t owner = within + rotation;
  return owner >= servers ? owner - servers : owner;
}

// 𝕀_j for every server j, fixed for (M, n, seed) and built once in O(M/64): the sorted granules
// each server owns, and each granule's position in its owner's list. Server j's slots are
// 64·granules(j).size() (≈ M/n); slot s holds index granules(j)[s/64]·64 + s%64 (slots past M stay
// empty). Memory ≈ M/64 · 14 bytes. No per-server dense buffer over all M exists anywhere.
class HashLayout {
 public:
  HashLayout() = default;
  HashLayout(std::uint64_t elements, std::uint32_t servers, std::uint64_t seed);

  std::uint64_t elements() const { return elements_; }
  std::uint32_t servers() const { return servers_; }
  bool matches(std::uint64_t elements, std::uint32_t servers, std::uint64_t seed) const {
    return elements_ == elements && servers_ == servers && seed_ == seed && !offsets_.empty();
  }
  std::span<const std::uint64_t> granules(std::uint32_t server) const {
    return {granules_.data() + offsets_[server], offsets_[server + 1] - offsets_[server]};
  }
  std::size_t slot_count(std::uint32_t server) const {
    return (offsets_[server + 1] - offsets_[server]) * kZenGranule;
  }
  // Slot of idx on its owner.
  std::size_t slot(std::uint64_t idx) const {
    return static_cast<std::size_t>(granule_slot_[idx / kZenGranule]) * kZenGranule +
           idx % kZenGranule;
  }
  // How many of `server`'s granules lie below `granule` (its slots below granule·64 / 64).
  std::size_t granules_before(std::uint32_t server, std::uint64_t granule) const;
  std::uint64_t index_of(std::uint32_t server, std::size_t slot) const {
    return granules_[offsets_[server] + slot / kZenGranule] * kZenGranule + slot % kZenGranule;
  }
  // zen_owner of every granule, tabulated (M/64 entries): one load instead of a hash per lookup.
  std::span<const std::uint16_t> owner_table() const { return granule_owner_; }

 private:
  std::uint64_t elements_ = 0;
  std::uint32_t servers_ = 0;
  std::uint64_t seed_ = 0;
  std::vector<std::uint64_t> offsets_;        // servers + 1 entries into granules_
  std::vector<std::uint64_t> granules_;       // per server, sorted
  std::vector<std::uint32_t> granule_slot_;   // granule -> its position in its owner's list
  std::vector<std::uint16_t> granule_owner_;  // granule -> zen_owner (servers <= 65536)
};

// A local gradient grouped by owner: counts[j] entries for server j, consecutive, servers in order,
// each block in increasing index order (the sort is stable). Ready for one alltoallv.
template <class Index>
struct HashPartition {
  std::vector<std::size_t> counts;
  std::vector<sparse::Entry<Index>> entries;
};

// Counting sort by owner (layout.servers() servers, grad.elements == layout.elements()): two
// passes, O(nnz) time and memory, lossless (every entry lands in exactly one server's block; index
// 0 and M-1 are ordinary entries: there is no empty-slot marker).
// `part` is overwritten; reusing it across steps avoids reallocating its buffers.
template <class Index>
void zen_partition(const SparseGradient<Index>& grad, const HashLayout& layout,
                   HashPartition<Index>& part);

// Hash-bitmap encoding of slot values: bit s set iff slot s is non-zero; values of the set slots in
// slot order. Bitmap bytes: ceil(slots / 8).
struct BitmapBlock {
  std::vector<std::uint8_t> bitmap;
  std::vector<float> values;
};
BitmapBlock bitmap_encode(std::span<const float> slot_values);

// The pull travels in chunks so that receivers decode chunk p while chunk p+1 is on the wire.
// A chunk is a range of granules [bounds[p], bounds[p+1]) of [0, M) (a consecutive, sorted piece
// of the result). Chunk bounds are chosen among bucket bounds (zen_pull_buckets(M) equal ranges of
// granules) so that chunks carry about equal bytes: every server reports its non-zero sums per
// bucket in one small allgather, so every rank computes the same bounds and every block's size.

// `parts` equal ranges of the granules of [0, M): parts + 1 granule bounds.
std::vector<std::uint64_t> zen_granule_bounds(std::uint64_t elements, std::uint32_t parts);
// Buckets for balancing the pull: one per 64 granules, 1 to 256.
std::uint32_t zen_pull_buckets(std::uint64_t elements);
// Chunk bounds (a subset of bucket_bounds, first and last included, at most
// zen_pull_chunk_count + 1) with about equal bytes per chunk. bucket_nnz[j·H + b]: server j's
// non-zero sums in bucket b.
std::vector<std::uint64_t> zen_balanced_chunks(const HashLayout& layout,
                                               std::span<const std::uint64_t> bucket_bounds,
                                               std::span<const std::uint64_t> bucket_nnz,
                                               std::uint32_t max_chunks,
                                               std::uint64_t min_block_bytes = 0);
// How many chunks the pull takes: as many as keep the average block (one server's part of one
// chunk, by the weights zen_balanced_chunks balances: 8 bytes per granule, 4 per non-zero) at
// least min_block_bytes, 1 to max_chunks (max_chunks when min_block_bytes is 0). Every chunk is
// one collective of n - 1 messages per rank; at many ranks, eight chunks of small blocks cost
// more in per-message overhead and per-block work than their overlap saves
// (docs/results/scale.md).
std::uint32_t zen_pull_chunk_count(const HashLayout& layout,
                                   std::span<const std::uint64_t> bucket_bounds,
                                   std::span<const std::uint64_t> bucket_nnz,
                                   std::uint32_t max_chunks, std::uint64_t min_block_bytes);
// The same rule on a pull of `total` bytes (by those weights) from `servers` servers.
std::uint32_t zen_pull_chunks_for(double total, std::uint32_t servers, std::uint32_t max_chunks,
                                  std::uint64_t min_block_bytes);
// The smallest block a pull chunk may have on a network: the configured one
// (SchemeOptions::zen_pull_min_block), or the share of the bandwidth-delay product α·b of each of
// the servers − 1 blocks a rank receives per chunk, where larger (a WAN), so that no chunk pays
// more in latency than in transfer: the chunks travel one after another, each a latency. 0
// (always the most chunks) stays 0.
std::uint64_t zen_pull_min_block(std::uint64_t configured, double latency_s,
                                 double bandwidth_bytes_per_s, std::uint32_t servers);
// The largest pull block over `slots` slots in any format and at any count of non-zeros (header,
// the larger of the bitmap and indices or Elias-Fano, 4 bytes per slot): what a receiver that
// does not know the block's size makes room for.
std::size_t zen_pull_block_bound(std::size_t slots, std::size_t index_bytes);
// Whether Zen's push and pull over M elements among `servers` ranks go without counts first (one
// exchange each): where even the largest pull it could have (every server's block at its bound)
// fits one chunk of min_block_bytes blocks (never with min_block_bytes 0: the most chunks).
bool zen_exchanges_without_counts(std::uint64_t elements, std::uint32_t servers,
                                  std::size_t index_bytes, std::uint64_t min_block_bytes);
// How a server codes the indices of its pull blocks; it announces this with its counts, so that
// every receiver knows every block's format and size from the counts alone.
enum class PullCoding : std::uint8_t {
  coo = 0,            // zen_coo: the indices
  bitmap_or_coo = 1,  // zen: the hash bitmap over the server's slots unless indices are at most
                      // 1/kZenCooKeyShare of its bytes
  smallest = 2,       // zen_ef: the smallest of bitmap, indices, Elias-Fano (elias_fano.h) and
                      // Elias-Fano of the empty slots
  elias_fano = 3,     // Elias-Fano in every block (SchemeOptions::zen_force_elias_fano: tests)
  elias_fano_complement = 4,  // Elias-Fano of the empty slots in every block (tests)
  // zen folding its pull in place (SchemeOptions::fold_in_place): bitmap or indices, whichever is
  // smaller. The reader that folds in place reads indices faster than a sparse bitmap (the
  // decoder's reason for kZenCooKeyShare does not hold). Announced as bitmap_or_coo with the fold
  // flag (zen_pull.cpp), so not among the kPullCodings a server announces.
  bitmap_or_coo_smaller = 5,
};
inline constexpr std::uint8_t kPullCodings = 5;  // the codings a server announces
// Zen (bitmap_or_coo) codes a block's indices as a bitmap unless indices take at most a quarter
// of the bitmap's bytes (density under 1/128 with 4-byte indices), not wherever they are smaller:
// a bitmap block decodes several times faster per entry (one branch-free word per granule; COO
// costs a data-dependent branch per granule), and between 1/128 and 1/32 the bytes a bitmap adds
// cost less than the decode it saves at 25 Gbit/s (docs/results/sync.md, "Which coding Zen pulls").
inline constexpr std::size_t kZenCooKeyShare = 4;
// A pull block over `slots` slots holding `nnz` non-zeros: its format (0 indices, 1 bitmap,
// 2 Elias-Fano of the non-zero slots, 3 Elias-Fano of the empty slots: the code for dense blocks,
// slots - nnz positions) and its size in bytes.
std::uint8_t zen_pull_format(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                             PullCoding coding);
std::size_t zen_pull_block_bytes(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                                 PullCoding coding);
// The same block's index bytes (bitmap, indices or Elias-Fano code), header and values excluded.
std::size_t zen_pull_key_bytes(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                               PullCoding coding);

// A server's sums after the push, ready to be encoded chunk by chunk.
template <class Index>
struct ZenServerSums {
  bool sparse = false;  // few entries: sorted idx/val instead of a slot buffer
  // When !sparse: one float per slot, where the sums are built; then its first nnz_before.back()
  // floats are the non-zero sums in slot order (the rest is scratch).
  std::vector<float> buffer;
  std::vector<float> range_scratch;  // when !sparse: each task's slot range, zero between calls
  std::vector<Index> idx;            // non-zero sums in slot order, when sparse
  std::vector<float> val;
  std::vector<sparse::Entry<Index>> sorted;  // when sparse: scratch of the entries' sort
  std::vector<std::size_t> radix_hist;       // and its digit counts
  std::vector<std::uint64_t> words;          // non-zero bitmap over the server's slots
  std::vector<std::uint64_t> nnz_before;     // non-zeros in words [0, w), words + 1 entries
  std::vector<std::uint64_t> bucket_nnz;     // non-zeros per bucket of bucket_bounds

  // The non-zero sums in slot order (either form).
  std::span<const float> nonzero_values() const {
    if (sparse) return val;
    return {buffer.data(), nnz_before.empty() ? 0 : static_cast<std::size_t>(nnz_before.back())};
  }
};

// Server side: every received push entry (counts[j] from rank j) must be an index below M that
// `server` owns, and each sender's entries in increasing index order. MalformedMessage naming the
// sender otherwise. zen_aggregate with the counts checks the same on its way (and calls this for
// the message); without them, call this first.
template <class Index>
void zen_check_push(const HashLayout& layout, std::uint32_t server,
                    std::span<const sparse::Entry<Index>> received,
                    std::span<const std::size_t> counts);

// Server side, step 1: sums the entries this server received over its slots (a compact buffer of
// ≈ M/n floats, never M) and counts the non-zero sums per bucket. With `counts` (the senders'
// block sizes) the buffer is built range by range of cache size, each sender's block walked in
// step with the ranges, and the entries are checked on the way as zen_check_push checks them
// (MalformedMessage naming the sender; no entry outside this server's slots is ever added; after
// it, `sums` holds nothing usable), so the push is read once. Counts that do not add up to the
// entries: std::invalid_argument. Without counts (empty), the caller has checked the entries.
// The non-zero sums end up in slot order at the buffer's start (nonzero_values()). In the sparse
// form (fewer entries than a sixteenth of the slots) `received` is sorted by index in place.
// With parts > 1, the slot buffer's form is built by `parts` tasks of `parallel` (empty: one after
// another), each over one range of the slots (zeroing, adding the entries of its range in the
// order received, then the bitmap words and the compaction): the sums are the same for every
// number of parts.
using ParallelTasks =
    std::function<void(std::size_t tasks, const std::function<void(std::size_t task)>& run)>;
template <class Index>
void zen_aggregate(const HashLayout& layout, std::uint32_t server,
                   std::vector<sparse::Entry<Index>>& received,
                   std::span<const std::uint64_t> bucket_bounds, ZenServerSums<Index>& sums,
                   std::span<const std::size_t> counts = {}, unsigned parts = 1,
                   const ParallelTasks& parallel = {});
// Step 2: appends the pull block of the server's slots [s0, s1) (multiples of 64) to `block`:
// [u8 format][u64 nnz][bitmap | indices | Elias-Fano code][values]; returns its size
// (= zen_pull_block_bytes; `block` grows by exactly that). With parts > 1 a slot-buffer server's
// COO indices are written by `parts` tasks of `parallel` over ranges of the words: the same bytes
// for every number of parts.
template <class Index>
std::size_t zen_encode_pull_chunk(const HashLayout& layout, std::uint32_t server,
                                  const ZenServerSums<Index>& sums, std::size_t s0, std::size_t s1,
                                  PullCoding coding, std::vector<std::uint8_t>& block,
                                  unsigned parts = 1, const ParallelTasks& parallel = {});
// One chunk covering all of [0, M).
template <class Index>
void zen_encode_pull_block(const HashLayout& layout, std::uint32_t server,
                           std::vector<sparse::Entry<Index>>& received, PullCoding coding,
                           std::vector<std::uint8_t>& block);
template <class Index>
std::vector<std::uint8_t> zen_encode_pull_block(const HashLayout& layout, std::uint32_t server,
                                                std::vector<sparse::Entry<Index>>& received,
                                                PullCoding coding) {
  std::vector<std::uint8_t> block;
  zen_encode_pull_block(layout, server, received, coding, block);
  return block;
}

// Receiver side: decodes one chunk's n pull blocks (concatenated, block j has counts[j] bytes)
// covering granules [granule_begin, granule_end) into oi/ov in index order; returns the number of
// entries. The output arrays must hold capacity + kZenDecodeSlack entries (the decoder writes in
// whole rounds of 8 entries, 16 with AVX-512). Throws std::runtime_error on a malformed block or
// more than `capacity` entries.
//
// `progress`, if set, is called every 4096 granules of a one-part decode: a real MPI library moves
// the next chunk only while it is entered. With parts > 1 the index range is split into `parts`
// ranges of about equal work, each decoded by one task of `parallel` (a count of tasks and the
// task; empty: the tasks run one after another, here), after a first round of tasks that counts
// every server's non-zeros per range; `progress` is not called then (the tasks may run on other
// threads). The output is the same for every number of parts.
//
// `order`, if not empty, is the server of each block as they lie in `blocks` (a permutation of
// 0..n-1; a grouped pull receives them column by column); counts stay indexed by server.
inline constexpr std::size_t kZenDecodeSlack = 16;
template <class Index>
std::size_t zen_decode_pull_chunk(const HashLayout& layout, std::uint64_t granule_begin,
                                  std::uint64_t granule_end, std::span<const std::uint8_t> blocks,
                                  std::span<const std::size_t> counts, Index* oi, float* ov,
                                  std::size_t capacity, const std::function<void()>& progress = {},
                                  unsigned parts = 1, const ParallelTasks& parallel = {},
                                  std::span<const std::uint32_t> order = {});
// The non-zeros the blocks' headers announce (block j has counts[j] bytes), checked against M:
// MalformedMessage for a block too short for its header or more non-zeros than elements.
std::uint64_t zen_pull_blocks_nnz(std::span<const std::uint8_t> blocks,
                                  std::span<const std::size_t> counts, std::uint64_t elements);
// All of [0, M) (one-chunk blocks) into one gradient sorted by index.
template <class Index>
void zen_decode_pull(const HashLayout& layout, std::span<const std::uint8_t> blocks,
                     std::span<const std::size_t> counts, SparseGradient<Index>& out);

}  // namespace atl::sync
