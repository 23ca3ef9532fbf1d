#include "atoll/sync/zen_partition.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace atl::sync {

template <class Index>
HashLayout<Index>::HashLayout(std::uint64_t elements, std::uint32_t servers, std::uint64_t seed)
    : elements_(elements), servers_(servers), seed_(seed) {
  if (servers == 0) throw std::invalid_argument("hash layout needs at least one server");
  if (elements > sparse::max_elements<Index>()) {
    throw std::invalid_argument(
        fmt::format("M = {} does not fit {}-bit indices", elements, 8 * sizeof(Index)));
  }
  std::vector<std::uint64_t> counts(servers, 0);
  std::vector<std::uint32_t> owner_of(elements);
  for (std::uint64_t i = 0; i < elements; ++i) {
    owner_of[i] = zen_owner(i, servers, seed);
    ++counts[owner_of[i]];
  }
  offsets_.assign(servers + 1, 0);
  for (std::uint32_t j = 0; j < servers; ++j) {
    if (counts[j] > std::numeric_limits<std::uint32_t>::max()) {
      throw std::invalid_argument(
          fmt::format("M = {} is too large for the hash layout: server {} would own {} slots",
                      elements, j, counts[j]));
    }
    offsets_[j + 1] = offsets_[j] + counts[j];
  }
  members_.resize(elements);
  slots_.resize(elements);
  std::vector<std::uint64_t> cursor(offsets_.begin(), offsets_.end() - 1);
  for (std::uint64_t i = 0; i < elements; ++i) {
    const auto j = owner_of[i];
    slots_[i] = static_cast<std::uint32_t>(cursor[j] - offsets_[j]);
    members_[cursor[j]++] = static_cast<Index>(i);
  }
}

template <class Index>
HashPartition<Index> zen_partition(const SparseGradient<Index>& grad, std::uint32_t servers,
                                   std::uint64_t seed) {
  const std::size_t nnz = grad.nnz();
  HashPartition<Index> part;
  part.counts.assign(servers, 0);
  // Pass 1: owner of each entry (kept, so the hash is computed once) and per-server counts.
  std::vector<std::uint32_t> owner(nnz);
  for (std::size_t i = 0; i < nnz; ++i) {
    owner[i] = zen_owner(grad.indices[i], servers, seed);
    ++part.counts[owner[i]];
  }
  // Pass 2: stable scatter into per-server blocks.
  std::vector<std::size_t> cursor(servers, 0);
  for (std::uint32_t j = 1; j < servers; ++j) cursor[j] = cursor[j - 1] + part.counts[j - 1];
  part.entries.resize(nnz);
  for (std::size_t i = 0; i < nnz; ++i) {
    part.entries[cursor[owner[i]]++] = {grad.indices[i], grad.values[i]};
  }
  return part;
}

BitmapBlock bitmap_encode(std::span<const float> slot_values) {
  BitmapBlock block;
  const std::size_t n = slot_values.size();
  block.bitmap.assign((n + 7) / 8, 0);
  block.values.resize(n);  // shrunk below; branch-free writes need room for every slot
  std::size_t k = 0;
  for (std::size_t base = 0; base < n; base += 64) {
    const std::size_t end = std::min(n, base + 64);
    std::uint64_t word = 0;
    for (std::size_t p = base; p < end; ++p) {
      const float v = slot_values[p];
      const bool nz = v != 0.0f;
      word |= static_cast<std::uint64_t>(nz) << (p - base);
      block.values[k] = v;
      k += nz;
    }
    std::memcpy(block.bitmap.data() + base / 8, &word, (end - base + 7) / 8);
  }
  block.values.resize(k);
  return block;
}

template <class Index>
void bitmap_decode(std::span<const std::uint8_t> bitmap, std::span<const float> values,
                   std::span<const Index> members, std::vector<Index>& out_indices,
                   std::vector<float>& out_values) {
  if (bitmap.size() != (members.size() + 7) / 8) {
    throw std::invalid_argument(fmt::format("bitmap of {} bytes for {} members", bitmap.size(),
                                            members.size()));
  }
  std::size_t k = 0;
  for (std::size_t base = 0; base < members.size(); base += 64) {
    std::uint64_t word = 0;
    std::memcpy(&word, bitmap.data() + base / 8, std::min<std::size_t>(8, bitmap.size() - base / 8));
    while (word) {
      const std::size_t p = base + static_cast<std::size_t>(std::countr_zero(word));
      word &= word - 1;
      if (p >= members.size() || k >= values.size()) {
        throw std::invalid_argument("bitmap has more set bits than members or values");
      }
      out_indices.push_back(members[p]);
      out_values.push_back(values[k++]);
    }
  }
  if (k != values.size()) {
    throw std::invalid_argument(
        fmt::format("bitmap has {} set bits but {} values were sent", k, values.size()));
  }
}

template class HashLayout<std::uint32_t>;
template class HashLayout<std::uint64_t>;
template HashPartition<std::uint32_t> zen_partition(const SparseGradient<std::uint32_t>&,
                                                    std::uint32_t, std::uint64_t);
template HashPartition<std::uint64_t> zen_partition(const SparseGradient<std::uint64_t>&,
                                                    std::uint32_t, std::uint64_t);
template void bitmap_decode<std::uint32_t>(std::span<const std::uint8_t>, std::span<const float>,
                                           std::span<const std::uint32_t>,
                                           std::vector<std::uint32_t>&, std::vector<float>&);
template void bitmap_decode<std::uint64_t>(std::span<const std::uint8_t>, std::span<const float>,
                                           std::span<const std::uint64_t>,
                                           std::vector<std::uint64_t>&, std::vector<float>&);

}  // namespace atl::sync
