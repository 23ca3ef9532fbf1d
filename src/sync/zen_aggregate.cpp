// Zen's server side: the pushed entries checked, summed into the server's slots, and the
// non-zero bitmap words of the sums (zen_partition.h); the bitmap block encoder shares the masks.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

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

// The `words` words of slots at `from`: out[w] = nonzero_mask64 of slots [64 w, 64 w + 64), and the
// non-zero sums copied, in slot order, to `to`, in one pass; returns how many. kZeroFrom: every
// slot read is set back to zero (nonzero_take: a scratch range, zero between uses); else `to` may
// be `from` (nonzero_compact: in place, no value moves up). The AVX-512 form stores 16 floats per
// chunk of 16 slots, up to 15 past the values it copies: in place, the store of word w's chunk q
// starts at most 64 w + 16 q values into the range, so it ends at most where chunk q + 1 begins,
// which is read after it; elsewhere at most to where the chunk ends counted from `to` minus the
// values before.
#if ATOLL_HAVE_AVX512_KERNELS
template <bool kZeroFrom>
ATOLL_AVX512 std::size_t nonzero_copy_wide(float* from, std::size_t words, std::uint64_t* out,
                                           float* to) {
  const __m512 zero = _mm512_setzero_ps();
  float* const first = to;
  for (std::size_t w = 0; w < words; ++w) {
    float* v = from + w * kZenGranule;
    std::uint64_t word = 0;
    for (int q = 0; q < 4; ++q) {
      const __m512 x = _mm512_loadu_ps(v + 16 * q);
      const auto m = _mm512_cmp_ps_mask(x, zero, _CMP_NEQ_UQ);  // as nonzero_mask64
      _mm512_storeu_ps(to, _mm512_maskz_compress_ps(m, x));
      if constexpr (kZeroFrom) _mm512_storeu_ps(v + 16 * q, zero);
      to += __builtin_popcount(m);
      word |= static_cast<std::uint64_t>(m) << (16 * q);
    }
    out[w] = word;
  }
  return static_cast<std::size_t>(to - first);
}
#endif

template <bool kZeroFrom>
std::size_t nonzero_copy(float* from, std::size_t words, std::uint64_t* out, float* to) {
#if ATOLL_HAVE_AVX512_KERNELS
  if (util::avx512_kernels()) return nonzero_copy_wide<kZeroFrom>(from, words, out, to);
#endif
  float* const first = to;
  for (std::size_t w = 0; w < words; ++w) {
    float* v = from + w * kZenGranule;
    out[w] = nonzero_mask64(v);
    for (std::uint64_t word = out[w]; word; word &= word - 1)
      *to++ = v[static_cast<std::size_t>(std::countr_zero(word))];
    if constexpr (kZeroFrom) std::fill(v, v + kZenGranule, 0.0f);
  }
  return static_cast<std::size_t>(to - first);
}

std::size_t nonzero_compact(float* buf, std::size_t words, std::uint64_t* out) {
  return nonzero_copy<false>(buf, words, out, buf);
}
std::size_t nonzero_take(float* scratch, std::size_t words, std::uint64_t* out, float* to) {
  return nonzero_copy<true>(scratch, words, out, to);
}

// zen_aggregate's range of slots: 1024 words, 256 KiB of sums, held in a core's L2 cache while the
// senders' entries of the range are added (the whole buffer, ≈ 4 MB at M = 2^24 and 16 servers,
// is not). Each task builds its ranges in one scratch range of its own, reused (added to, then
// its non-zero sums copied out and every slot set back to zero in the same pass: the scratch is
// zero between ranges and between calls, so it is never filled before use), and the slot
// buffer's 4 MB, which under SMPI's 16 ranks in turn come from memory, are never zeroed nor read.
constexpr std::size_t kAggregateRangeWords = 1024;

// Where one task's walk of every sender's block began and ended (entry positions in `received`),
// [task * senders + sender]; `bad`: a task met an entry that failed the check.
struct SenderWalks {
  std::vector<std::size_t> begin, end;
  std::vector<char> bad;
};

// add_checked_ranges' word lookup: a range's own table of its granules (kNoLocal where the span
// holds a granule of another server) where the span of global granules its words cover is at most
// kLocalGranules (up to about 64 servers at 1024 words a range), else the layout's table. The own
// table is built from the server's sorted granules (8 KiB a range) and stays in L1/L2, where the
// layout's slot table (4 bytes per granule of M, 1 MiB at M = 2^24) is read at one line per
// entry: under SMPI, 16 ranks in turn, those lines come from the last-level cache or memory
// (perf on atoll-cpu-bench's BM_ZenAggregateEncodeCold: a third of the aggregation's time at
// that one load).
constexpr std::uint64_t kLocalGranules = 65536;
constexpr std::uint16_t kNoLocal = 0xFFFF;
constexpr std::uint32_t kNoWord = 0xFFFFFFFF;

// Adds every sender's entries of one range into its scratch: sender j's from cursor[j] while below
// `hi`, each above floor[j] (the least index it may send next) and in word word_of(x) of the range
// (kNoWord: no slot of the range holds x). Advances cursor and floor; false at the first entry
// that fails.
template <class Index, class WordOf>
bool add_range(const sparse::Entry<Index>* e, std::span<const std::size_t> block_begin,
               std::uint64_t hi, std::size_t* cursor, std::uint64_t* floor, float* scratch,
               WordOf word_of) {
  const std::size_t senders = block_begin.size() - 1;
  for (std::size_t j = 0; j < senders; ++j) {
    std::size_t k = cursor[j];
    std::uint64_t least = floor[j];
    for (const std::size_t end = block_begin[j + 1]; k < end; ++k) {
      const auto x = static_cast<std::uint64_t>(e[k].index);
      if (x >= hi) break;
      const std::uint32_t w = word_of(x);
      if (x < least || w == kNoWord) return false;
      scratch[std::size_t{w} * kZenGranule + x % kZenGranule] += e[k].value;
      least = x + 1;
    }
    cursor[j] = k;
    floor[j] = least;
  }
  return true;
}

// One task of zen_aggregate with the senders' counts: the slots [w0, w1) in ranges of
// kAggregateRangeWords built in `scratch` (that many words of slots, zero on entry and on return),
// every sender's entries of the range added (in the order received), then its bitmap words and
// its non-zero sums, appended from buf + 64 w0 on (nonzero_take). The push is checked on the way,
// so its entries are read once: each sender's walk starts at its first entry not below the task's
// first index (binary search, trusted only once the walks chain, see walks_chain) and takes, range
// by range, the entries below the range's end; each must be above the sender's previous one (and
// not below the task's first index) and sit in a slot of the range that holds its index, that is in
// one of this server's granules; no other entry is added (false: the task stopped there).
template <class Index>
bool add_checked_ranges(const HashLayout& layout, std::uint32_t server,
                        std::span<const sparse::Entry<Index>> received,
                        std::span<const std::size_t> block_begin, std::size_t w0, std::size_t w1,
                        float* buf, float* scratch, std::uint64_t* words_out,
                        std::size_t* walk_begin, std::size_t* walk_end) {
  constexpr std::uint64_t G = kZenGranule;
  const std::size_t senders = block_begin.size() - 1;
  const std::span<const std::uint64_t> mine = layout.granules(server);  // sorted
  const auto first_index = [&](std::size_t w) {
    return w == mine.size() ? layout.elements() : mine[w] * G;
  };
  const std::uint64_t task_lo = first_index(w0);
  const sparse::Entry<Index>* e = received.data();
  std::vector<std::size_t> cursor(senders);
  std::vector<std::uint64_t> floor(senders, task_lo);  // the least index a sender may send next
  for (std::size_t j = 0; j < senders; ++j) {
    // Binary search for the first entry not below task_lo (written out: std::lower_bound's
    // precondition, a sorted range, is what is being checked).
    std::size_t lo = block_begin[j], hi = block_begin[j + 1];
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (static_cast<std::uint64_t>(e[mid].index) < task_lo)
        lo = mid + 1;
      else
        hi = mid;
    }
    cursor[j] = walk_begin[j] = lo;
  }
  float* to = buf + w0 * G;
  std::vector<std::uint16_t> local;  // the range's word of each granule in its span (kNoLocal)
  for (std::size_t r0 = w0; r0 < w1; r0 += kAggregateRangeWords) {
    const std::size_t r1 = std::min(w1, r0 + kAggregateRangeWords);
    const std::uint64_t hi = first_index(r1);  // <= M
    const std::uint64_t g0 = mine[r0], span = mine[r1 - 1] - g0 + 1;
    bool ok;
    if (span <= kLocalGranules) {
      local.assign(span, kNoLocal);
      for (std::size_t w = r0; w < r1; ++w)
        local[mine[w] - g0] = static_cast<std::uint16_t>(w - r0);
      ok = add_range<Index>(e, block_begin, hi, cursor.data(), floor.data(), scratch,
                            [&](std::uint64_t x) -> std::uint32_t {
                              const std::uint64_t rel = x / G - g0;  // wraps below g0
                              return rel < span && local[rel] != kNoLocal ? local[rel] : kNoWord;
                            });
    } else {
      ok = add_range<Index>(e, block_begin, hi, cursor.data(), floor.data(), scratch,
                            [&](std::uint64_t x) -> std::uint32_t {
                              const std::size_t s = layout.slot(x);  // x < hi <= M
                              if (s < r0 * G || s >= r1 * G || mine[s / G] != x / G) return kNoWord;
                              return static_cast<std::uint32_t>(s / G - r0);
                            });
    }
    if (!ok) {
      std::fill(scratch, scratch + (r1 - r0) * G, 0.0f);  // zero for the next call
      return false;
    }
    to += nonzero_take(scratch, r1 - r0, words_out + r0, to);
  }
  std::copy(cursor.begin(), cursor.end(), walk_end);
  return true;
}

// The tasks' walks took every sender's block whole and each entry once: the first task's walk
// starts at the block's first entry, each next task's where the previous one's ended, and the
// last one ends at the block's end. Then, each walk being increasing and inside its task's
// indices, every block is increasing and every entry was checked.
bool walks_chain(const SenderWalks& walks, std::span<const std::size_t> block_begin,
                 std::size_t tasks) {
  const std::size_t senders = block_begin.size() - 1;
  for (std::size_t j = 0; j < senders; ++j) {
    if (walks.begin[j] != block_begin[j]) return false;
    for (std::size_t t = 0; t + 1 < tasks; ++t)
      if (walks.end[t * senders + j] != walks.begin[(t + 1) * senders + j]) return false;
    if (walks.end[(tasks - 1) * senders + j] != block_begin[j + 1]) return false;
  }
  return true;
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
  // Each sender's block in increasing index order, as zen_partition sends it (zen_aggregate, which
  // checks the same on its way, walks each block in step with its ranges of slots).
  check_received_entries<Index>(
      "zen push", received, counts,
      [&](std::size_t, Index x) { return x < M && owner[x / kZenGranule] == server; },
      EntryOrder::per_sender);
}

namespace {
// How many tasks build zen_aggregate's slot buffer (task t: words [words t / tasks, words (t+1) /
// tasks)).
std::size_t aggregate_tasks(unsigned parts, std::size_t words) {
  return std::max<std::size_t>(1, std::min<std::size_t>(parts, words));
}

// zen_aggregate's slot-buffer form: compact buffer over this server's slots (≈ M/n floats), built
// by tasks over consecutive words (slot order is index order). Per slot the entries are added in
// the order received, for any tasks and ranges. Each task's non-zero sums end up in slot order
// from its first slot on (join_task_runs makes the tasks' follow each other: the encoder copies
// them).
template <class Index>
void build_slot_sums(const HashLayout& layout, std::uint32_t server,
                     const std::vector<sparse::Entry<Index>>& received, ZenServerSums<Index>& sums,
                     std::span<const std::size_t> counts, unsigned parts,
                     const ParallelTasks& parallel) {
  const std::size_t slots = layout.slot_count(server);
  const std::size_t words = slots / kZenGranule;
  sums.buffer.resize(slots);
  float* buf = sums.buffer.data();
  const std::size_t tasks = aggregate_tasks(parts, words);
  if (!counts.empty()) sums.range_scratch.resize(tasks * kAggregateRangeWords * kZenGranule);
  const auto task_words = [&](std::size_t t) {
    return std::pair{words * t / tasks, words * (t + 1) / tasks};
  };
  std::function<void(std::size_t)> task;
  std::vector<std::size_t> block_begin;
  SenderWalks walks;
  if (counts.empty()) {
    // Without the counts (entries checked by the caller): one pass over all entries per task.
    task = [&, M = layout.elements()](std::size_t t) {
      const auto [w0, w1] = task_words(t);
      std::fill(buf + w0 * kZenGranule, buf + w1 * kZenGranule, 0.0f);
      const std::uint64_t lo = layout.index_of(server, w0 * kZenGranule);
      const std::uint64_t hi = w1 == words ? M : layout.index_of(server, w1 * kZenGranule);
      for (const auto& e : received) {
        const auto x = static_cast<std::uint64_t>(e.index);
        if (x >= lo && x < hi) buf[layout.slot(x)] += e.value;
      }
      nonzero_compact(buf + w0 * kZenGranule, w1 - w0, sums.words.data() + w0);
    };
  } else {
    // With them: ranges of the slots that stay in cache while every sender adds to them, the
    // push checked on the way (add_checked_ranges).
    block_begin.assign(counts.size() + 1, 0);
    for (std::size_t j = 0; j < counts.size(); ++j) block_begin[j + 1] = block_begin[j] + counts[j];
    walks.begin.resize(tasks * counts.size());
    walks.end.resize(tasks * counts.size());
    walks.bad.assign(tasks, 0);
    task = [&](std::size_t t) {
      const auto [w0, w1] = task_words(t);
      const std::size_t at = t * counts.size();
      float* scratch = sums.range_scratch.data() + t * kAggregateRangeWords * kZenGranule;
      walks.bad[t] = !add_checked_ranges<Index>(layout, server, received, block_begin, w0, w1, buf,
                                                scratch, sums.words.data(), walks.begin.data() + at,
                                                walks.end.data() + at);
    };
  }
  if (parallel && tasks > 1)
    parallel(tasks, task);
  else
    for (std::size_t t = 0; t < tasks; ++t) task(t);
  if (!counts.empty() && (std::find(walks.bad.begin(), walks.bad.end(), 1) != walks.bad.end() ||
                          !walks_chain(walks, block_begin, tasks))) {
    // A malformed block: the entry-by-entry check names the sender and the entry.
    zen_check_push<Index>(layout, server, received, counts);
    throw MalformedMessage(fmt::format(
        "zen push: server {} found the senders' blocks malformed (the entry-by-entry check did "
        "not; please report this)",
        server));
  }
}

// Each task's non-zero sums start at its first slot (build_slot_sums): moved down, in order, to
// follow each other (a task's run never reaches the next task's, which starts at least where
// this one's values end).
void join_task_runs(float* buf, std::span<const std::uint64_t> nnz_before, std::size_t words,
                    unsigned parts) {
  const std::size_t tasks = aggregate_tasks(parts, words);
  for (std::size_t t = 0; t < tasks; ++t) {
    const std::size_t w0 = words * t / tasks, w1 = words * (t + 1) / tasks;
    const std::uint64_t n = nnz_before[w1] - nnz_before[w0];
    if (n > 0 && nnz_before[w0] != w0 * kZenGranule)
      std::memmove(buf + nnz_before[w0], buf + w0 * kZenGranule, n * sizeof(float));
  }
}

// The sparse form's sums (few entries for many slots, checked by the caller): the entries sorted
// by index (slot order is index order within a server) with a stable LSD radix sort of 12-bit
// digits (two passes up to M = 2^24) in place of std::stable_sort, so that equal indices keep the
// senders' order, the order the buffer path adds in; then each index's run summed in that order.
// Keyed by index, not slot: no table lookup per entry (under SMPI, where the layout's tables come
// from memory, keying by slot measured 0.49 ms a call at 0.1%, 16 ranks, against 0.41).
// `received` (not empty) is reordered; sums.sorted is the sort's other buffer and sums.radix_hist
// its digit counts (both kept between calls); the sums are appended to sums.idx and sums.val.
template <class Index>
void sum_few(const HashLayout& layout, std::vector<sparse::Entry<Index>>& received,
             ZenServerSums<Index>& sums) {
  constexpr unsigned kDigitBits = 12;
  constexpr std::size_t kDigits = std::size_t{1} << kDigitBits;
  const std::uint64_t M = layout.elements();
  const auto bits = static_cast<unsigned>(std::bit_width(M > 0 ? M - 1 : 0));
  const unsigned passes = (bits + kDigitBits - 1) / kDigitBits;
  std::vector<std::size_t>& hist = sums.radix_hist;
  hist.assign(std::size_t{passes} * kDigits, 0);
  for (const auto& e : received) {
    const auto x = static_cast<std::uint64_t>(e.index);
    for (unsigned p = 0; p < passes; ++p)
      ++hist[p * kDigits + ((x >> (p * kDigitBits)) & (kDigits - 1))];
  }
  sums.sorted.resize(received.size());
  sparse::Entry<Index>* from = received.data();
  sparse::Entry<Index>* to = sums.sorted.data();
  for (unsigned p = 0; p < passes; ++p) {
    std::size_t* h = hist.data() + p * kDigits;
    if (h[(static_cast<std::uint64_t>(from[0].index) >> (p * kDigitBits)) & (kDigits - 1)] ==
        received.size())
      continue;  // every entry has this digit: the order stands
    std::size_t at = 0;
    for (std::size_t d = 0; d < kDigits; ++d) at += std::exchange(h[d], at);
    for (std::size_t k = 0; k < received.size(); ++k) {
      const auto d =
          (static_cast<std::uint64_t>(from[k].index) >> (p * kDigitBits)) & (kDigits - 1);
      to[h[d]++] = from[k];
    }
    std::swap(from, to);
  }
  sum_sorted_runs<Index>(std::span<const sparse::Entry<Index>>(from, received.size()), sums.idx,
                         sums.val);
}

}  // namespace

template <class Index>
void zen_aggregate(const HashLayout& layout, std::uint32_t server,
                   std::vector<sparse::Entry<Index>>& received,
                   std::span<const std::uint64_t> bucket_bounds, ZenServerSums<Index>& sums,
                   std::span<const std::size_t> counts, unsigned parts,
                   const ParallelTasks& parallel) {
  std::size_t counted = 0;
  bool past = false;  // a count past the entries left (so that the sum cannot wrap around)
  for (const std::size_t c : counts) {
    past = past || c > received.size() - counted;
    if (!past) counted += c;
  }
  if (!counts.empty() && (past || counted != received.size())) {
    throw std::invalid_argument(
        fmt::format("zen_aggregate: the counts do not add up to the {} entries", received.size()));
  }
  const std::size_t slots = layout.slot_count(server);
  const std::size_t words = slots / kZenGranule;
  sums.sparse = received.size() * 16 < slots;
  sums.words.resize(words);
  const bool dense = !sums.sparse && words > 0;
  if (!counts.empty() && !dense) zen_check_push<Index>(layout, server, received, counts);
  if (dense) {
    build_slot_sums<Index>(layout, server, received, sums, counts, parts, parallel);
  } else if (!sums.sparse) {
    sums.buffer.clear();  // no slots
  } else {
    // Few entries for many slots: sort them instead of scanning the slots. Slot order is index
    // order (granules are sorted).
    sums.idx.clear();
    sums.val.clear();
    if (!received.empty()) sum_few<Index>(layout, received, sums);
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
  if (dense) join_task_runs(sums.buffer.data(), sums.nnz_before, words, parts);
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
