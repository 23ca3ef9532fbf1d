// Zen's building blocks (Wang et al., OSDI'25, §4-5): the ownership function, the hash layout
// 𝕀_j, the hash partition of a local gradient, and the hash-bitmap encoding of a server's result.
//
// Ownership is defined ONCE, here: owner(idx) = h0(idx) mapped to [0, n). Push, aggregation and the
// bitmap layout all call zen_owner, so they cannot disagree (the reference code's push used
// floor(M/n)·n, its layout M: server assignment differed unless n divided M).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"

namespace atl::sync {

using sparse::SparseGradient;

// MurmurHash3's 64-bit finaliser of (idx + seed): a bijection of 64-bit words with full avalanche.
constexpr std::uint64_t zen_hash(std::uint64_t idx, std::uint64_t seed) {
  std::uint64_t k = idx + seed * 0x9e3779b97f4a7c15ull;
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// The server that owns index idx among `servers` (h0(idx) scaled to [0, servers) by multiply-shift,
// which is unbiased to within 2^-32 and avoids a division).
constexpr std::uint32_t zen_owner(std::uint64_t idx, std::uint32_t servers, std::uint64_t seed) {
  return static_cast<std::uint32_t>(
      (static_cast<unsigned __int128>(zen_hash(idx, seed) >> 32) * servers) >> 32);
}

// 𝕀_j for every server j: the sorted members of each server, and each index's slot in its owner's
// list. Fixed for (M, n, seed); built once in O(M) and reused every step.
// Memory: M·(sizeof(Index) + 4) bytes. No per-server dense value buffer exists anywhere.
template <class Index>
class HashLayout {
 public:
  HashLayout() = default;
  HashLayout(std::uint64_t elements, std::uint32_t servers, std::uint64_t seed);

  std::uint64_t elements() const { return elements_; }
  std::uint32_t servers() const { return servers_; }
  std::uint64_t seed() const { return seed_; }
  std::span<const Index> members(std::uint32_t server) const {
    return {members_.data() + offsets_[server], offsets_[server + 1] - offsets_[server]};
  }
  std::uint64_t member_count(std::uint32_t server) const {
    return offsets_[server + 1] - offsets_[server];
  }
  // Slot of idx in members(owner(idx)).
  std::uint32_t slot(Index idx) const { return slots_[idx]; }
  bool matches(std::uint64_t elements, std::uint32_t servers, std::uint64_t seed) const {
    return elements_ == elements && servers_ == servers && seed_ == seed && !offsets_.empty();
  }

 private:
  std::uint64_t elements_ = 0;
  std::uint32_t servers_ = 0;
  std::uint64_t seed_ = 0;
  std::vector<std::uint64_t> offsets_;  // servers + 1 entries
  std::vector<Index> members_;
  std::vector<std::uint32_t> slots_;
};

// A local gradient grouped by owner: counts[j] entries for server j, consecutive, servers in order,
// each block in increasing index order (the sort is stable). Ready for one alltoallv.
template <class Index>
struct HashPartition {
  std::vector<std::size_t> counts;
  std::vector<sparse::Entry<Index>> entries;
};

// Counting sort by owner: two passes, O(nnz) time and memory, lossless (every entry lands in exactly
// one server's block; index 0 and M-1 are ordinary entries: there is no empty-slot marker).
template <class Index>
HashPartition<Index> zen_partition(const SparseGradient<Index>& grad, std::uint32_t servers,
                                   std::uint64_t seed);

// Hash-bitmap encoding of a server's aggregate over its members: bit p set iff slot p is non-zero,
// values of the set slots in slot order. Bitmap bytes: ceil(|𝕀_j| / 8).
struct BitmapBlock {
  std::vector<std::uint8_t> bitmap;
  std::vector<float> values;
};
BitmapBlock bitmap_encode(std::span<const float> slot_values);
// Appends (members[p], value) for every set bit p, in slot order (hence increasing index order).
template <class Index>
void bitmap_decode(std::span<const std::uint8_t> bitmap, std::span<const float> values,
                   std::span<const Index> members, std::vector<Index>& out_indices,
                   std::vector<float>& out_values);

}  // namespace atl::sync
