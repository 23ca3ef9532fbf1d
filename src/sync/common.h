// Private helpers shared by the scheme implementations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "atoll/sync/scheme.h"

namespace atl::sync {

using sparse::Entry;

template <class Index>
std::vector<Entry<Index>> to_entries(std::span<const Index> idx, std::span<const float> val) {
  std::vector<Entry<Index>> e(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) e[i] = {idx[i], val[i]};
  return e;
}

// Entries sorted by index (equal indices adjacent, in the order they are to be added): each
// index's values summed in that order, the non-zero sums appended to out_idx and out_val.
template <class Index>
void sum_sorted_runs(std::span<const Entry<Index>> sorted, std::vector<Index>& out_idx,
                     std::vector<float>& out_val) {
  for (std::size_t k = 0; k < sorted.size();) {
    const Index x = sorted[k].index;
    float sum = 0.0f;
    for (; k < sorted.size() && sorted[k].index == x; ++k) sum += sorted[k].value;
    if (sum != 0.0f) {
      out_idx.push_back(x);
      out_val.push_back(sum);
    }
  }
}

// Server-side aggregation (Zen, Sparse PS): sums the received entries of the indices this server
// owns and returns the non-zero sums sorted by index. `slot(idx)` maps an owned index to
// [0, slot_count) monotonically; `index_of(slot)` inverts it. Two exact strategies:
// - a compact buffer over the server's own slots (≈ M/n floats, never M): O(received + slots);
// - sorting the received entries when they are few compared with the slots.
template <class Index, class SlotFn, class IndexFn>
void aggregate_owned(std::vector<Entry<Index>>& received, std::size_t slot_count, SlotFn slot,
                     IndexFn index_of, std::vector<Index>& out_idx, std::vector<float>& out_val) {
  out_idx.clear();
  out_val.clear();
  if (received.size() * 16 < slot_count) {
    // Stable: equal indices stay in sender (rank) order, the order the buffer path sums in.
    std::stable_sort(
        received.begin(), received.end(),
        [](const Entry<Index>& a, const Entry<Index>& b) { return a.index < b.index; });
    sum_sorted_runs<Index>(received, out_idx, out_val);
    return;
  }
  std::vector<float> buffer(slot_count, 0.0f);
  for (const auto& e : received) buffer[slot(e.index)] += e.value;
  for (std::size_t s = 0; s < slot_count; ++s) {
    if (buffer[s] != 0.0f) {
      out_idx.push_back(index_of(s));
      out_val.push_back(buffer[s]);
    }
  }
}

// A received block of bytes read as a sequence of trivially copyable items.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  template <class T>
  T read() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  void take(void* out, std::size_t n) {
    require(n);
    if (n == 0) return;  // `out` may be an empty vector's null data(): memcpy(null, .., 0) is UB
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
  }
  std::size_t remaining() const { return bytes_.size() - at_; }

 private:
  void require(std::size_t n) const;
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

class ByteWriter {
 public:
  template <class T>
  void write(const T& v) {
    append(&v, sizeof(T));
  }
  void append(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  std::vector<std::uint8_t> bytes;
};

// Splits [0, M) into n contiguous ranges of near-equal size: range r is [begin(r), begin(r+1)).
inline std::uint64_t range_begin(std::uint64_t elements, std::uint32_t ranks, std::uint32_t r) {
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(elements) * r / ranks);
}

// The sparse parameter server's aggregation: server `rank` of the range partition sums the entries
// it received for its own range (checked by sparse_ps_check_push) into sorted non-zero sums.
template <class Index>
void sum_own_range(std::vector<Entry<Index>>& received, std::uint64_t elements, std::uint32_t ranks,
                   std::uint32_t rank, std::vector<Index>& out_idx, std::vector<float>& out_val) {
  const std::uint64_t first = range_begin(elements, ranks, rank);
  const std::uint64_t count = range_begin(elements, ranks, rank + 1) - first;
  aggregate_owned<Index>(
      received, count, [&](Index x) { return static_cast<std::size_t>(x - first); },
      [&](std::size_t s) { return static_cast<Index>(first + s); }, out_idx, out_val);
}

}  // namespace atl::sync
