#include "common.h"

#include <bit>
#include <numeric>
#include <stdexcept>

namespace atl::sync {

void ByteReader::require(std::size_t n) const {
  if (at_ + n > bytes_.size()) {
    throw std::runtime_error("malformed synchronization message: " + std::to_string(n) +
                             " bytes needed at offset " + std::to_string(at_) + " of " +
                             std::to_string(bytes_.size()));
  }
}

template <class Index>
void sort_unique_by_index(std::uint64_t elements, std::vector<Index>& idx,
                          std::vector<float>& val) {
  const std::size_t count = idx.size();
  if (std::is_sorted(idx.begin(), idx.end())) return;
  if (count < elements / 256) {  // sparse: comparison sort of a permutation
    std::vector<std::uint32_t> order(count);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return idx[a] < idx[b]; });
    std::vector<Index> si(count);
    std::vector<float> sv(count);
    for (std::size_t k = 0; k < count; ++k) {
      si[k] = idx[order[k]];
      sv[k] = val[order[k]];
    }
    idx.swap(si);
    val.swap(sv);
    return;
  }
  // Dense enough: the rank of index x among all present indices is
  // prefix[x / 64] + popcount(bits[x / 64] & below(x % 64)).
  const std::size_t words = (elements + 63) / 64;
  std::vector<std::uint64_t> bits(words, 0);
  for (auto x : idx) bits[x >> 6] |= std::uint64_t{1} << (x & 63);
  std::vector<std::uint32_t> prefix(words);
  std::uint32_t running = 0;
  for (std::size_t w = 0; w < words; ++w) {
    prefix[w] = running;
    running += static_cast<std::uint32_t>(std::popcount(bits[w]));
  }
  std::vector<Index> si(count);
  std::vector<float> sv(count);
  for (std::size_t k = 0; k < count; ++k) {
    const auto x = idx[k];
    const std::uint64_t below = (std::uint64_t{1} << (x & 63)) - 1;
    const std::size_t at = prefix[x >> 6] + std::popcount(bits[x >> 6] & below);
    si[at] = x;
    sv[at] = val[k];
  }
  idx.swap(si);
  val.swap(sv);
}

template void sort_unique_by_index(std::uint64_t, std::vector<std::uint32_t>&, std::vector<float>&);
template void sort_unique_by_index(std::uint64_t, std::vector<std::uint64_t>&, std::vector<float>&);

}  // namespace atl::sync
