// zen_merge_sum (zen_merge.h).
#include "zen_merge.h"

#include <algorithm>
#include <cstdint>

namespace atl::sync {
namespace {

// Merges two sorted runs into out, adding the values of equal indices; returns the entries written.
template <class Index>
std::size_t merge2(std::span<const Entry<Index>> a, std::span<const Entry<Index>> b,
                   Entry<Index>* out) {
  std::size_t i = 0, j = 0, k = 0;
  while (i < a.size() && j < b.size()) {
    const Index x = a[i].index, y = b[j].index;
    if (x < y) {
      out[k++] = a[i++];
    } else if (y < x) {
      out[k++] = b[j++];
    } else {
      out[k++] = Entry<Index>{x, a[i++].value + b[j++].value};
    }
  }
  out = std::copy(a.begin() + static_cast<std::ptrdiff_t>(i), a.end(), out + k);
  std::copy(b.begin() + static_cast<std::ptrdiff_t>(j), b.end(), out);
  return k + (a.size() - i) + (b.size() - j);
}

}  // namespace

template <class Index>
void zen_merge_sum(std::span<const std::span<const Entry<Index>>> runs,
                   std::vector<Entry<Index>>& out, std::vector<Entry<Index>>& tmp) {
  using Run = std::span<const Entry<Index>>;
  std::vector<Run> cur;
  std::size_t total = 0;
  for (const Run& r : runs) {
    if (r.empty()) continue;
    cur.push_back(r);
    total += r.size();
  }
  const std::size_t base = out.size();
  out.resize(base + total);
  if (cur.size() <= 1) {
    if (!cur.empty()) std::copy(cur[0].begin(), cur[0].end(), out.begin() + base);
    return;
  }
  // Pairwise rounds through the two halves of tmp, alternately; the last one writes into out.
  tmp.resize(2 * total);
  for (int round = 0; cur.size() > 2; ++round) {
    Entry<Index>* dst = tmp.data() + (round % 2) * total;
    std::vector<Run> next;
    std::size_t pos = 0;
    for (std::size_t i = 0; i < cur.size(); i += 2) {
      std::size_t wrote;
      if (i + 1 < cur.size()) {
        wrote = merge2<Index>(cur[i], cur[i + 1], dst + pos);
      } else {  // the odd one out, copied: its half is overwritten two rounds on
        wrote = static_cast<std::size_t>(std::copy(cur[i].begin(), cur[i].end(), dst + pos) -
                                         (dst + pos));
      }
      next.emplace_back(dst + pos, wrote);
      pos += wrote;
    }
    cur = std::move(next);
  }
  out.resize(base + merge2<Index>(cur[0], cur[1], out.data() + base));
}

template void zen_merge_sum(std::span<const std::span<const Entry<std::uint32_t>>>,
                            std::vector<Entry<std::uint32_t>>&, std::vector<Entry<std::uint32_t>>&);
template void zen_merge_sum(std::span<const std::span<const Entry<std::uint64_t>>>,
                            std::vector<Entry<std::uint64_t>>&, std::vector<Entry<std::uint64_t>>&);

}  // namespace atl::sync
