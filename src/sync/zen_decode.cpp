// Zen's pull, receiver side: every server's block of one chunk of the index space, decoded into
// one array sorted by index, in one pass in index order; optionally split into ranges decoded by
// parallel tasks (issue 18 item 2).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "atoll/sparse/elias_fano.h"
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"
#include "atoll/util/cpu_features.h"
#include "zen_blocks.h"
#include "zen_views.h"
#include "zen_wide.h"

namespace atl::sync {
namespace {
using namespace zen_blocks;
using zen_views::ChunkViews;
using zen_views::malformed;
using zen_views::parse_views;
using zen_views::View;

struct Cursor {
  std::uint64_t key = 0;    // bitmap: next granule word; COO: next entry
  std::uint64_t value = 0;  // next value
};

// What every range's walk reads.
struct Walk {
  const HashLayout& layout;
  std::uint64_t granule_begin;
  std::span<const View> views;
  const std::uint8_t* blocks_end;
};

// Decodes granules [g_begin, g_end) from `cursor` (one per server) on into entries
// [pos, pos_end); no write reaches write_limit (whole rounds of 8 entries, 16 with AVX-512,
// overshoot up to 16 entries where there is room). Returns the position after the last entry.
//
// Granule g belongs to server owner(g), and each server's granules come in increasing order in its
// block, so a cursor per server walks its block monotonically. The output is written strictly
// sequentially; no presence bitmap, no sort.
template <class Index, bool kWide>
[[gnu::always_inline]] inline std::uint64_t walk_range_impl(const Walk& w, std::uint64_t g_begin,
                                                            std::uint64_t g_end, Cursor* cursor,
                                                            Index* oi, float* ov, std::uint64_t pos,
                                                            std::uint64_t pos_end,
                                                            std::uint64_t write_limit,
                                                            const std::function<void()>& progress) {
  constexpr std::uint64_t G = kZenGranule;
  static_assert(G == 64, "the decoder reads one 64-bit bitmap word per granule");
  const std::uint64_t M = w.layout.elements();
  const std::uint16_t* owner = w.layout.owner_table().data();
  const std::uint64_t pos_begin = pos;
  constexpr std::uint64_t kProgressEvery = 4096;
  for (std::uint64_t g0 = g_begin; g0 < g_end; g0 += kProgressEvery) {
    const std::uint64_t g1 = std::min(g_end, g0 + kProgressEvery);
    for (std::uint64_t g = g0; g < g1; ++g) {
      const std::uint32_t j = owner[g];
      const View& v = w.views[j];
      Cursor& c = cursor[j];
      const std::uint64_t base = g * G;
      if (v.format == kBitmap) {
        std::uint64_t word;
        std::memcpy(&word, v.keys + 8 * c.key++, 8);
        const auto count = static_cast<std::uint64_t>(std::popcount(word));
        if (c.value + count > v.nnz || pos + count > pos_end ||
            (base + 63 >= M && (word >> (M - base - 1) >> 1))) {
          throw malformed(j, "bitmap does not match its values or has a bit past M");
        }
        const std::uint8_t* vals = v.values + c.value * sizeof(float);
        c.value += count;
        // Sixteen servers' bitmap and value streams plus the output are more concurrent streams
        // than the hardware prefetcher follows: fetch each server's stream ahead explicitly.
        __builtin_prefetch(v.keys + 8 * c.key + 512);
        __builtin_prefetch(vals + 1024);
        // Empty words take one round of the word kernel too, with no branch on them: whether a
        // granule of a Zipf gradient holds anything is close to a coin toss, and a mispredicted
        // branch costs more than a round that writes nothing the next word does not overwrite.
        // Rounds are whole (16 or 8 entries): the overshoot lands in room the next word
        // overwrites, where there is room (else the exact loop below).
        constexpr std::uint64_t kRound = kWide ? 16 : 8;
        const std::uint64_t span = std::max(kRound, (count + kRound - 1) & ~(kRound - 1));
        if (vals + span * sizeof(float) <= w.blocks_end && pos + span <= write_limit) {
#if ATOLL_HAVE_AVX512_KERNELS
          if constexpr (kWide) {
            zen_wide::emit_word(word, static_cast<std::uint32_t>(base), vals, count, oi + pos,
                                ov + pos);
            pos += count;
            continue;
          }
#endif
          // Eight set bits per round with no data-dependent branch inside: a word's bit count
          // varies randomly (6.4 on average for the 1% Zipf case), and a loop that exits on it
          // costs one misprediction per word. An exhausted word gives index base + 63.
          std::uint64_t done = 0;
          do {
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
              oi[pos + done + k] = static_cast<Index>(base + lowest_bit_or_63(word));
              word &= word - 1;
            }
            std::memcpy(ov + pos + done, vals + done * sizeof(float), 8 * sizeof(float));
            done += 8;
          } while (done < count);
        } else {  // the last values of the buffer or of this range: exactly `count` entries
          for (std::uint64_t k = 0; k < count; ++k) {
            oi[pos + k] =
                static_cast<Index>(base + static_cast<std::uint64_t>(std::countr_zero(word)));
            std::memcpy(ov + pos + k, vals + k * sizeof(float), sizeof(float));
            word &= word - 1;
          }
        }
        pos += count;
      } else {
        auto key = [&](std::uint64_t k) {
          Index x;
          std::memcpy(&x, v.keys + k * sizeof(Index), sizeof(Index));
          return static_cast<std::uint64_t>(x);
        };
        // Most granules of a sparse COO block hold none of its entries: one key read decides.
        if (c.key >= v.nnz || key(c.key) >= base + G) continue;
#if ATOLL_HAVE_AVX512_KERNELS
        if constexpr (kWide) {
          // Where the granule holds two entries or more: 16 keys at a time while 16 entries can
          // be read and written here; the portable loop below takes what is left.
          // (Not in the last granule where M ends inside it: the loop below checks for M.)
          while (c.key + 1 < v.nnz && key(c.key + 1) < base + G && base + G <= 0xFFFFFFFFu &&
                 base + G <= M) {
            const std::uint8_t* vals = v.values + c.key * sizeof(float);
            if (vals + 16 * sizeof(float) > w.blocks_end || pos + 16 > write_limit) break;
            const auto lanes = static_cast<unsigned>(std::min<std::uint64_t>(16, v.nnz - c.key));
            const bool has_prev = pos > pos_begin;
            const int n = zen_wide::coo_take(v.keys + c.key * sizeof(Index), vals,
                                             static_cast<std::uint32_t>(base), lanes, has_prev,
                                             has_prev ? oi[pos - 1] : 0, oi + pos, ov + pos);
            if (n < 0 || pos + static_cast<std::uint64_t>(n) > pos_end)
              throw malformed(j, "COO indices unsorted, repeated or not owned");
            pos += static_cast<std::uint64_t>(n);
            c.key += static_cast<std::uint64_t>(n);
            if (n < 16) break;
          }
        }
#endif
        while (c.key < v.nnz) {
          Index x;
          std::memcpy(&x, v.keys + c.key * sizeof(Index), sizeof(Index));
          // An index past M in the last granule is left over, as one outside the granule: refused.
          if (x >= base + G || x >= M) break;
          if (x < base || pos >= pos_end || (pos > pos_begin && x <= oi[pos - 1]))
            throw malformed(j, "COO indices unsorted, repeated or not owned");
          oi[pos] = x;
          std::memcpy(ov + pos, v.values + c.key * sizeof(float), sizeof(float));
          ++pos;
          ++c.key;
        }
      }
    }
    if (progress) progress();
  }
  return pos;
}

#if ATOLL_HAVE_AVX512_KERNELS
// The walk compiled for AVX-512, its word kernel inlined (32-bit indices).
ATOLL_AVX512 std::uint64_t walk_range_wide(const Walk& w, std::uint64_t g_begin,
                                           std::uint64_t g_end, Cursor* cursor, std::uint32_t* oi,
                                           float* ov, std::uint64_t pos, std::uint64_t pos_end,
                                           std::uint64_t write_limit,
                                           const std::function<void()>& progress) {
  return walk_range_impl<std::uint32_t, true>(w, g_begin, g_end, cursor, oi, ov, pos, pos_end,
                                              write_limit, progress);
}
#endif

template <class Index>
std::uint64_t walk_range(const Walk& w, std::uint64_t g_begin, std::uint64_t g_end, Cursor* cursor,
                         Index* oi, float* ov, std::uint64_t pos, std::uint64_t pos_end,
                         std::uint64_t write_limit, const std::function<void()>& progress) {
#if ATOLL_HAVE_AVX512_KERNELS
  if constexpr (std::is_same_v<Index, std::uint32_t>) {
    if (util::avx512_kernels())
      return walk_range_wide(w, g_begin, g_end, cursor, oi, ov, pos, pos_end, write_limit,
                             progress);
  }
#endif
  return walk_range_impl<Index, false>(w, g_begin, g_end, cursor, oi, ov, pos, pos_end, write_limit,
                                       progress);
}

// The first of `keys` (nnz sorted indices of width sizeof(Index), unaligned) not below x.
template <class Index>
std::uint64_t coo_lower_bound(const std::uint8_t* keys, std::uint64_t nnz, std::uint64_t x) {
  std::uint64_t lo = 0, hi = nnz;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    Index k;
    std::memcpy(&k, keys + mid * sizeof(Index), sizeof(Index));
    if (static_cast<std::uint64_t>(k) < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Server j's non-zeros in granules [g0, g1) of the chunk (first == k == 0: from its first entry;
// last: up to its last), by the popcount of its bitmap words or a search of its indices.
template <class Index>
std::uint64_t count_in(const Walk& w, std::uint32_t j, std::uint64_t g0, std::uint64_t g1,
                       bool first, bool last) {
  const View& v = w.views[j];
  if (v.format == kBitmap) {
    const std::size_t before = w.layout.granules_before(j, w.granule_begin);
    const std::size_t a = w.layout.granules_before(j, g0) - before;
    const std::size_t b = w.layout.granules_before(j, g1) - before;
    std::uint64_t count = 0;
    for (std::size_t k = a; k < b; ++k) {
      std::uint64_t word;
      std::memcpy(&word, v.keys + 8 * k, 8);
      count += static_cast<std::uint64_t>(std::popcount(word));
    }
    return count;
  }
  const std::uint64_t lo = first ? 0 : coo_lower_bound<Index>(v.keys, v.nnz, g0 * kZenGranule);
  const std::uint64_t hi = last ? v.nnz : coo_lower_bound<Index>(v.keys, v.nnz, g1 * kZenGranule);
  if (hi < lo) throw malformed(j, "COO indices unsorted, repeated or not owned");
  return hi - lo;
}

// The chunk split into `parts` ranges of about equal work, decoded by parallel tasks. Round 1
// counts every server's non-zeros in each of 4·parts pieces of the range; their prefix sums give
// each piece's cursors and output position; round 2 walks whole pieces, grouped `parts` ways by
// their work (entries written plus a quarter per granule word read).
template <class Index>
std::uint64_t decode_parts(const Walk& w, std::uint64_t granule_end, unsigned parts,
                           const ParallelTasks& parallel, Index* oi, float* ov,
                           std::uint64_t total) {
  const auto run = [&](std::size_t tasks, const std::function<void(std::size_t)>& task) {
    if (parallel)
      parallel(tasks, task);
    else
      for (std::size_t t = 0; t < tasks; ++t) task(t);
  };
  const std::size_t n = w.views.size();
  const std::uint64_t granules = granule_end - w.granule_begin;
  const std::size_t K = static_cast<std::size_t>(std::min<std::uint64_t>(granules, 4ull * parts));
  if (K == 0) return 0;
  std::vector<std::uint64_t> piece(K + 1);
  for (std::size_t k = 0; k <= K; ++k) piece[k] = w.granule_begin + granules * k / K;
  std::vector<std::uint64_t> start((K + 1) * n, 0);  // server j's entries before piece k
  run(K, [&](std::size_t k) {
    for (std::uint32_t j = 0; j < n; ++j)
      start[(k + 1) * n + j] = count_in<Index>(w, j, piece[k], piece[k + 1], k == 0, k + 1 == K);
  });
  std::vector<std::uint64_t> pos(K + 1, 0);
  for (std::size_t k = 1; k <= K; ++k) {
    for (std::uint32_t j = 0; j < n; ++j) {
      start[k * n + j] += start[(k - 1) * n + j];
      pos[k] += start[k * n + j];
    }
  }
  for (std::uint32_t j = 0; j < n; ++j)
    if (start[K * n + j] != w.views[j].nnz)
      throw malformed(j, "bitmap does not match its values or has a bit past M");
  if (pos[K] != total) throw std::logic_error("zen: pull decode counted entries inconsistently");
  // Group pieces into `parts` ranges of about equal work.
  auto work_before = [&](std::size_t k) { return 4 * pos[k] + (piece[k] - w.granule_begin); };
  std::vector<std::size_t> group(parts + 1, K);
  group[0] = 0;
  for (unsigned t = 1, k = 0; t < parts; ++t) {
    const std::uint64_t target = work_before(K) * t / parts;
    while (k < K && work_before(k) < target) ++k;
    group[t] = k;
  }
  run(parts, [&](std::size_t t) {
    const std::size_t k0 = group[t], k1 = group[t + 1];
    if (k0 >= k1) return;
    std::vector<Cursor> cursor(n);
    for (std::uint32_t j = 0; j < n; ++j) {
      cursor[j].value = start[k0 * n + j];
      cursor[j].key = w.views[j].format == kBitmap
                          ? w.layout.granules_before(j, piece[k0]) -
                                w.layout.granules_before(j, w.granule_begin)
                          : cursor[j].value;
    }
    const std::uint64_t limit = k1 == K ? total + kZenDecodeSlack : pos[k1];
    walk_range<Index>(w, piece[k0], piece[k1], cursor.data(), oi, ov, pos[k0], pos[k1], limit, {});
    for (std::uint32_t j = 0; j < n; ++j) {
      const Cursor& c = cursor[j];
      if ((w.views[j].format == kBitmap ? c.value : c.key) != start[k1 * n + j])
        throw malformed(j, "entries left over (not owned by this server or past M)");
    }
  });
  return total;
}

}  // namespace

template <class Index>
std::size_t zen_decode_pull_chunk(const HashLayout& layout, std::uint64_t granule_begin,
                                  std::uint64_t granule_end, std::span<const std::uint8_t> blocks,
                                  std::span<const std::size_t> counts, Index* oi, float* ov,
                                  std::size_t capacity, const std::function<void()>& progress,
                                  unsigned parts, const ParallelTasks& parallel,
                                  std::span<const std::uint32_t> order) {
  const auto n = static_cast<std::uint32_t>(counts.size());
  const std::uint64_t granules = (layout.elements() + kZenGranule - 1) / kZenGranule;
  if (!order.empty()) {  // a permutation of the servers
    std::vector<bool> seen(n, false);
    for (const std::uint32_t j : order) {
      if (order.size() != n || j >= n || seen[j])
        throw std::logic_error("zen_decode_pull_chunk: block order is not a permutation");
      seen[j] = true;
    }
  }
  if (n != layout.servers() || granule_begin > granule_end || granule_end > granules) {
    throw std::runtime_error(fmt::format(
        "zen: pull chunk of granules [{}, {}) with {} blocks; the layout has {} granules and {} "
        "servers",
        granule_begin, granule_end, n, granules, layout.servers()));
  }
  const ChunkViews c =
      parse_views(layout, granule_begin, granule_end, blocks, counts, sizeof(Index), order);
  if (c.total > capacity)
    throw MalformedMessage("zen: pull blocks hold more entries than announced");
  const Walk w{layout, granule_begin, c.views, blocks.data() + blocks.size()};
  if (parts > 1) return decode_parts<Index>(w, granule_end, parts, parallel, oi, ov, c.total);

  std::vector<Cursor> cursor(n);
  const std::uint64_t pos = walk_range<Index>(w, granule_begin, granule_end, cursor.data(), oi, ov,
                                              0, c.total, c.total + kZenDecodeSlack, progress);
  for (std::uint32_t j = 0; j < n; ++j) {
    const bool complete = c.views[j].format == kBitmap ? cursor[j].value == c.views[j].nnz
                                                       : cursor[j].key == c.views[j].nnz;
    if (!complete) throw malformed(j, "entries left over (not owned by this server or past M)");
  }
  return pos;
}

namespace {
std::uint64_t pull_block_nnz(std::span<const std::uint8_t> block) {
  if (block.size() < kBlockHeader) throw MalformedMessage("zen: malformed pull block: too short");
  std::uint64_t nnz;
  std::memcpy(&nnz, block.data() + 1, 8);
  return nnz;
}
}  // namespace

std::uint64_t zen_pull_blocks_nnz(std::span<const std::uint8_t> blocks,
                                  std::span<const std::size_t> counts, std::uint64_t elements) {
  std::uint64_t total = 0;
  std::size_t at = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] > blocks.size() - at) {
      throw MalformedMessage(fmt::format("zen: malformed pull block from server {}: too short", j));
    }
    if (counts[j] >= kBlockHeader) total += pull_block_nnz(blocks.subspan(at, counts[j]));
    at += counts[j];
  }
  if (total > elements) {
    throw MalformedMessage("zen: malformed pull blocks: more non-zeros than elements");
  }
  return total;
}

template <class Index>
void zen_decode_pull(const HashLayout& layout, std::span<const std::uint8_t> blocks,
                     std::span<const std::size_t> counts, SparseGradient<Index>& out) {
  const std::uint64_t total = zen_pull_blocks_nnz(blocks, counts, layout.elements());
  out.elements = layout.elements();
  out.indices.resize(total + kZenDecodeSlack);
  out.values.resize(total + kZenDecodeSlack);
  const std::uint64_t granules = (layout.elements() + kZenGranule - 1) / kZenGranule;
  const std::size_t got = zen_decode_pull_chunk<Index>(
      layout, 0, granules, blocks, counts, out.indices.data(), out.values.data(), total);
  out.indices.resize(got);  // drop the slack (shrinking keeps the allocation)
  out.values.resize(got);
}

#define ATOLL_ZEN_DECODE_INSTANTIATE(I)                                                    \
  template std::size_t zen_decode_pull_chunk(                                              \
      const HashLayout&, std::uint64_t, std::uint64_t, std::span<const std::uint8_t>,      \
      std::span<const std::size_t>, I*, float*, std::size_t, const std::function<void()>&, \
      unsigned, const ParallelTasks&, std::span<const std::uint32_t>);                     \
  template void zen_decode_pull(const HashLayout&, std::span<const std::uint8_t>,          \
                                std::span<const std::size_t>, SparseGradient<I>&);
ATOLL_ZEN_DECODE_INSTANTIATE(std::uint32_t)
ATOLL_ZEN_DECODE_INSTANTIATE(std::uint64_t)
#undef ATOLL_ZEN_DECODE_INSTANTIATE

}  // namespace atl::sync
