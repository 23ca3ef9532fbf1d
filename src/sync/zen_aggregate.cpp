// Zen's server side: the pushed entries checked, summed into the server's slots, and the
// non-zero bitmap words of the sums (zen_partition.h); the bitmap block encoder shares the masks.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "atoll/sync/zen_partition.h"
#include "atoll/util/cpu_features.h"

#ifdef __SSE2__
#include <immintrin.h>
#endif

#include "common.h"
#include "received_entries.h"
#include "zen_wide.h"

namespace atl::sync {

namespace {
// The 64-slot mask of non-zero floats at v[0..63].
std::uint64_t nonzero_mask64(const float* v) {
  std::uint64_t word = 0;
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  for (std::size_t p = 0; p < 64; p += 4) {
    const auto bits = _mm_movemask_ps(_mm_cmpneq_ps(_mm_loadu_ps(v + p), zero));
    word |= static_cast<std::uint64_t>(bits) << p;
  }
#else
  for (std::size_t p = 0; p < 64; ++p) word |= static_cast<std::uint64_t>(v[p] != 0.0f) << p;
#endif
  return word;
}

#if ATOLL_HAVE_AVX512_KERNELS
ATOLL_AVX512 void nonzero_words_wide(const float* v, std::size_t words, std::uint64_t* out) {
  for (std::size_t w = 0; w < words; ++w) out[w] = zen_wide::nonzero_mask64(v + w * kZenGranule);
}
#endif

// out[w] = nonzero_mask64 of slots [64 w, 64 w + 64) of v.
void nonzero_words(const float* v, std::size_t words, std::uint64_t* out) {
#if ATOLL_HAVE_AVX512_KERNELS
  if (util::avx512_kernels()) return nonzero_words_wide(v, words, out);
#endif
  for (std::size_t w = 0; w < words; ++w) out[w] = nonzero_mask64(v + w * kZenGranule);
}

// zen_aggregate's range of slots: 1024 words, 256 KiB of sums, held in a core's L2 cache while the
// senders' entries of the range are added (the whole buffer, ≈ 4 MB at M = 2^24 and 16 servers,
// is not).
constexpr std::size_t kAggregateRangeWords = 1024;

// The entries with index in [lo, hi) added into the slot sums `buf`, sender by sender: a sender's
// block is in increasing index order (zen_check_push), so its entries of the range are one run,
// found by binary search.
template <class Index>
void add_sender_runs(const HashLayout& layout, std::span<const sparse::Entry<Index>> received,
                     std::span<const std::size_t> counts, std::uint64_t lo, std::uint64_t hi,
                     float* buf) {
  const auto below = [](const sparse::Entry<Index>& e, std::uint64_t x) {
    return static_cast<std::uint64_t>(e.index) < x;
  };
  const sparse::Entry<Index>* first = received.data();
  for (const std::size_t c : counts) {
    const sparse::Entry<Index>* last = first + c;
    const auto* e = std::lower_bound(first, last, lo, below);
    const auto* end = std::lower_bound(e, last, hi, below);
    for (; e != end; ++e) buf[layout.slot(e->index)] += e->value;
    first = last;
  }
}
}  // namespace

BitmapBlock bitmap_encode(std::span<const float> slot_values) {
  BitmapBlock block;
  const std::size_t n = slot_values.size();
  const float* v = slot_values.data();
  block.bitmap.assign((n + 7) / 8, 0);
  // Pass 1: one bit per slot (4 slots per SSE compare where available), and the count.
  std::size_t count = 0;
  for (std::size_t base = 0; base < n; base += 64) {
    const std::size_t end = std::min(n, base + 64);
    std::uint64_t word = 0;
    if (end - base == 64) {
      word = nonzero_mask64(v + base);
    } else {  // the last, partial word
      for (std::size_t p = base; p < end; ++p)
        word |= static_cast<std::uint64_t>(v[p] != 0.0f) << (p - base);
    }
    std::memcpy(block.bitmap.data() + base / 8, &word, (end - base + 7) / 8);
    count += static_cast<std::size_t>(std::popcount(word));
  }
  // Pass 2: the values of the set slots, in slot order.
  block.values.resize(count);
  std::size_t k = 0;
  for (std::size_t base = 0; base < n; base += 64) {
    std::uint64_t word = 0;
    std::memcpy(&word, block.bitmap.data() + base / 8,
                std::min<std::size_t>(8, (n - base + 7) / 8));
    while (word) {
      block.values[k++] = v[base + static_cast<std::size_t>(std::countr_zero(word))];
      word &= word - 1;
    }
  }
  return block;
}

template <class Index>
void zen_check_push(const HashLayout& layout, std::uint32_t server,
                    std::span<const sparse::Entry<Index>> received,
                    std::span<const std::size_t> counts) {
  const std::uint64_t M = layout.elements();
  const std::uint16_t* owner = layout.owner_table().data();
  // Each sender's block in increasing index order, as zen_partition sends it: zen_aggregate
  // finds a sender's entries of a range of slots by binary search.
  check_received_entries<Index>(
      "zen push", received, counts,
      [&](std::size_t, Index x) { return x < M && owner[x / kZenGranule] == server; },
      EntryOrder::per_sender);
}

template <class Index>
void zen_aggregate(const HashLayout& layout, std::uint32_t server,
                   std::vector<sparse::Entry<Index>>& received,
                   std::span<const std::uint64_t> bucket_bounds, ZenServerSums<Index>& sums,
                   std::span<const std::size_t> counts, unsigned parts,
                   const ParallelTasks& parallel) {
  std::size_t counted = 0;
  for (const std::size_t c : counts) counted += c;
  if (!counts.empty() && counted != received.size()) {
    throw std::invalid_argument(
        fmt::format("zen_aggregate: counts add up to {}, {} entries", counted, received.size()));
  }
  const std::size_t slots = layout.slot_count(server);
  const std::size_t words = slots / kZenGranule;
  sums.sparse = received.size() * 16 < slots;
  sums.words.resize(words);
  if (!sums.sparse && words > 0) {
    // Compact buffer over this server's slots (≈ M/n floats), built range by range of the slots
    // (slot order is index order): zeroed, each sender's entries of that range added, then its
    // bitmap words. Per slot the entries are added in the order received, for any ranges.
    sums.buffer.resize(slots);
    float* buf = sums.buffer.data();
    const std::uint64_t M = layout.elements();
    // With the senders' counts, ranges of kAggregateRangeWords keep the buffer's range in cache
    // while every sender adds to it; without them, one pass over all entries per task.
    const std::size_t step = counts.empty() ? words : kAggregateRangeWords;
    const auto range = [&](std::size_t w0, std::size_t w1) {
      std::fill(buf + w0 * kZenGranule, buf + w1 * kZenGranule, 0.0f);
      const std::uint64_t lo = layout.index_of(server, w0 * kZenGranule);
      const std::uint64_t hi = w1 == words ? M : layout.index_of(server, w1 * kZenGranule);
      if (counts.empty()) {
        for (const auto& e : received) {
          const auto x = static_cast<std::uint64_t>(e.index);
          if (x >= lo && x < hi) buf[layout.slot(x)] += e.value;
        }
      } else {
        add_sender_runs<Index>(layout, received, counts, lo, hi, buf);
      }
      nonzero_words(buf + w0 * kZenGranule, w1 - w0, sums.words.data() + w0);
    };
    const std::size_t tasks = std::max<std::size_t>(1, std::min<std::size_t>(parts, words));
    const auto task = [&](std::size_t t) {
      const std::size_t w0 = words * t / tasks, w1 = words * (t + 1) / tasks;
      for (std::size_t w = w0; w < w1; w += step) range(w, std::min(w1, w + step));
    };
    if (parallel && tasks > 1)
      parallel(tasks, task);
    else
      for (std::size_t t = 0; t < tasks; ++t) task(t);
  } else if (!sums.sparse) {
    sums.buffer.clear();  // no slots
  } else {
    // Few entries for many slots: sort them instead of scanning the slots. Slot order is index
    // order (granules are sorted).
    aggregate_owned<Index>(
        received, slots, [&](Index x) { return layout.slot(x); },
        [&](std::size_t s) { return static_cast<Index>(layout.index_of(server, s)); }, sums.idx,
        sums.val);
    std::fill(sums.words.begin(), sums.words.end(), 0);
    for (auto x : sums.idx) {
      const auto s = layout.slot(x);
      sums.words[s / kZenGranule] |= std::uint64_t{1} << (s % kZenGranule);
    }
  }
  // Non-zeros before each word, then per bucket of the global granule space.
  sums.nnz_before.resize(words + 1);
  sums.nnz_before[0] = 0;
  for (std::size_t w = 0; w < words; ++w)
    sums.nnz_before[w + 1] =
        sums.nnz_before[w] + static_cast<std::uint64_t>(std::popcount(sums.words[w]));
  const std::size_t H = bucket_bounds.size() - 1;
  sums.bucket_nnz.resize(H);
  for (std::size_t b = 0; b < H; ++b) {
    sums.bucket_nnz[b] = sums.nnz_before[layout.granules_before(server, bucket_bounds[b + 1])] -
                         sums.nnz_before[layout.granules_before(server, bucket_bounds[b])];
  }
}

#define ATOLL_ZEN_INSTANTIATE(I)                                                                 \
  template void zen_check_push(const HashLayout&, std::uint32_t,                                 \
                               std::span<const sparse::Entry<I>>, std::span<const std::size_t>); \
  template void zen_aggregate(const HashLayout&, std::uint32_t, std::vector<sparse::Entry<I>>&,  \
                              std::span<const std::uint64_t>, ZenServerSums<I>&,                 \
                              std::span<const std::size_t>, unsigned, const ParallelTasks&);
ATOLL_ZEN_INSTANTIATE(std::uint32_t)
ATOLL_ZEN_INSTANTIATE(std::uint64_t)
#undef ATOLL_ZEN_INSTANTIATE

}  // namespace atl::sync
