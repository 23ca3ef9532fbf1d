// Zen's hash layout (granules to servers and slots) and the push-side partition of a sparse
// gradient into the servers' blocks (zen_partition.h).
#include "atoll/sync/zen_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "atoll/util/cpu_features.h"

#ifdef __SSE2__
#include <immintrin.h>
#endif

#include "common.h"
#include "received_entries.h"
#include "zen_blocks.h"
#include "zen_wide.h"

namespace atl::sync {

HashLayout::HashLayout(std::uint64_t elements, std::uint32_t servers, std::uint64_t seed)
    : elements_(elements), servers_(servers), seed_(seed) {
  if (servers == 0 || servers > 65536) {
    throw std::invalid_argument(
        fmt::format("hash layout supports 1 to 65536 servers (got {})", servers));
  }
  const std::uint64_t granules = (elements + kZenGranule - 1) / kZenGranule;
  std::vector<std::uint64_t> counts(servers, 0);
  for (std::uint64_t g = 0; g < granules; ++g) ++counts[zen_owner(g * kZenGranule, servers, seed)];
  offsets_.assign(servers + 1, 0);
  for (std::uint32_t j = 0; j < servers; ++j) {
    if (counts[j] > std::numeric_limits<std::uint32_t>::max()) {
      throw std::invalid_argument(
          fmt::format("M = {} is too large for the hash layout: server {} would own {} granules",
                      elements, j, counts[j]));
    }
    offsets_[j + 1] = offsets_[j] + counts[j];
  }
  granules_.resize(granules);
  granule_slot_.resize(granules);
  granule_owner_.resize(granules);
  std::vector<std::uint64_t> cursor(offsets_.begin(), offsets_.end() - 1);
  for (std::uint64_t g = 0; g < granules; ++g) {
    const auto j = zen_owner(g * kZenGranule, servers, seed);
    granule_owner_[g] = static_cast<std::uint16_t>(j);
    granule_slot_[g] = static_cast<std::uint32_t>(cursor[j] - offsets_[j]);
    granules_[cursor[j]++] = g;
  }
}

namespace {

// Two passes entry by entry (the previous implementation): used for 64-bit indices.
template <class Index>
void partition_by_entries(const SparseGradient<Index>& grad, const HashLayout& layout,
                          HashPartition<Index>& part) {
  const std::size_t nnz = grad.nnz();
  const std::uint32_t servers = layout.servers();
  const std::uint16_t* table = layout.owner_table().data();
  const Index* idx = grad.indices.data();
  const float* val = grad.values.data();
  std::vector<std::size_t> counts(2 * static_cast<std::size_t>(servers), 0);
  std::size_t* c0 = counts.data();
  std::size_t* c1 = c0 + servers;
  std::size_t i = 0;
  for (; i + 4 <= nnz; i += 4) {
    const std::uint64_t g = idx[i] / kZenGranule;
    if (idx[i + 3] / kZenGranule == g) {
      c0[table[g]] += 4;
    } else {
      ++c0[table[g]];
      ++c1[table[idx[i + 1] / kZenGranule]];
      ++c0[table[idx[i + 2] / kZenGranule]];
      ++c1[table[idx[i + 3] / kZenGranule]];
    }
  }
  for (; i < nnz; ++i) ++c0[table[idx[i] / kZenGranule]];
  part.counts.assign(servers, 0);
  for (std::uint32_t j = 0; j < servers; ++j) part.counts[j] = c0[j] + c1[j];
  std::vector<std::size_t> cursor(servers, 0);
  for (std::uint32_t j = 1; j < servers; ++j) cursor[j] = cursor[j - 1] + part.counts[j - 1];
  part.entries.resize(nnz);
  auto* out = part.entries.data();
  i = 0;
  for (; i + 4 <= nnz; i += 4) {
    const std::uint64_t g = idx[i] / kZenGranule;
    if (idx[i + 3] / kZenGranule == g) {
      const std::uint16_t o = table[g];
      auto* d = out + cursor[o];
      cursor[o] += 4;
      for (int k = 0; k < 4; ++k) d[k] = {idx[i + k], val[i + k]};
    } else {
      for (std::size_t k = i; k < i + 4; ++k)
        out[cursor[table[idx[k] / kZenGranule]]++] = {idx[k], val[k]};
    }
  }
  for (; i < nnz; ++i) out[cursor[table[idx[i] / kZenGranule]]++] = {idx[i], val[i]};
}

#ifdef __SSSE3__
// 32-bit indices, by granule runs (maximal sequences of consecutive entries in one granule, hence
// with one owner; at most 64 entries since indices are unique). Pass 1 (find_runs) finds the runs
// of each 64-entry block as a bit mask (SSE compares of neighbouring granules) and walks its bits:
// one owner lookup and one counter update per run, lengths and owners recorded. Pass 2 (copy_runs)
// copies each run to its server's cursor, 4 entries per pair of SSE stores. (AVX-512 masked loads
// and stores, 8 or 4 entries a round without slack or repair, measured 20-25% slower on the
// 1% / Zipf 1.1 gradient of atoll-cpu-bench: most runs are 1-3 entries long.)

// Pass 1: the runs' lengths and owners (nnz > 0; nnz entries of room each), the per-server counts
// added to `counts`; returns the number of runs.
template <class Owner>
std::size_t find_runs(const std::uint32_t* idx, std::size_t nnz, const std::uint16_t* table,
                      std::uint32_t* lens, Owner* owners, std::size_t* counts) {
  std::size_t nr = 0;
  std::size_t s = 0;  // start of the current run
  std::size_t o_cur = table[idx[0] / kZenGranule];
  auto close_run = [&](std::size_t end) {
    const std::size_t len = end - s;
    lens[nr] = static_cast<std::uint32_t>(len);
    owners[nr] = static_cast<Owner>(o_cur);
    counts[o_cur] += len;
    ++nr;
  };
  auto start_run = [&](std::size_t p) {
    close_run(p);
    s = p;
    o_cur = table[idx[p] / kZenGranule];
  };
  std::size_t b = 0;
  if (nnz >= 64) {
    __m128i prev = _mm_set1_epi32(static_cast<int>(idx[0] / kZenGranule));
    for (; b + 64 <= nnz; b += 64) {
      std::uint64_t starts = 0;  // bit k: entry b + k starts a run
      for (int q = 0; q < 4; ++q) {
        const auto* p = reinterpret_cast<const __m128i*>(idx + b + 16 * q);
        const __m128i g0 = _mm_srli_epi32(_mm_loadu_si128(p), 6);
        const __m128i g1 = _mm_srli_epi32(_mm_loadu_si128(p + 1), 6);
        const __m128i g2 = _mm_srli_epi32(_mm_loadu_si128(p + 2), 6);
        const __m128i g3 = _mm_srli_epi32(_mm_loadu_si128(p + 3), 6);
        const __m128i e0 = _mm_cmpeq_epi32(g0, _mm_alignr_epi8(g0, prev, 12));
        const __m128i e1 = _mm_cmpeq_epi32(g1, _mm_alignr_epi8(g1, g0, 12));
        const __m128i e2 = _mm_cmpeq_epi32(g2, _mm_alignr_epi8(g2, g1, 12));
        const __m128i e3 = _mm_cmpeq_epi32(g3, _mm_alignr_epi8(g3, g2, 12));
        prev = g3;
        const __m128i same = _mm_packs_epi16(_mm_packs_epi32(e0, e1), _mm_packs_epi32(e2, e3));
        const auto bits = static_cast<std::uint32_t>(_mm_movemask_epi8(same)) ^ 0xFFFFu;
        starts |= static_cast<std::uint64_t>(bits) << (16 * q);
      }
      if (b == 0) starts &= ~std::uint64_t{1};  // entry 0 opens the first run
      while (starts) {
        start_run(b + static_cast<std::size_t>(std::countr_zero(starts)));
        starts &= starts - 1;
      }
    }
  }
  for (std::size_t i = std::max<std::size_t>(b, 1); i < nnz; ++i)
    if (idx[i] / kZenGranule != idx[i - 1] / kZenGranule) start_run(i);
  close_run(nnz);
  return nr;
}

// Pass 2 with SSE: 4-entry stores (index and value vectors interleaved by unpacklo/unpackhi) that
// may run up to 3 entries past the run: inside the server's block those entries are rewritten by
// the server's next runs (runs are copied in input order); past the block's end they can only
// reach the first 3 entries of the following blocks (rewritten exactly at the end) or 3 entries
// of slack past the last block (`out` has nnz + 3 entries). `cursor` holds each block's start and
// is advanced.
template <class Owner>
void copy_runs(const std::uint32_t* idx, const float* val, std::size_t nnz,
               const std::uint32_t* lens, const Owner* owners, std::size_t nr,
               std::span<const std::size_t> counts, std::size_t* cursor,
               sparse::Entry<std::uint32_t>* out) {
  constexpr std::size_t kSlack = 3;
  const std::size_t servers = counts.size();
  std::vector<std::size_t> first(cursor, cursor + servers);
  // Runs [0, safe) end at or before `tail` and tail + 3 <= nnz, so their 4-wide loads stay inside
  // the input; the last few runs are copied entry by entry.
  std::size_t safe = nr, tail = nnz;
  while (safe > 0 && tail + kSlack > nnz) tail -= lens[--safe];
  {
    auto* out_b = reinterpret_cast<unsigned char*>(out);  // 8 bytes per entry
    const std::uint32_t* ip = idx;
    const float* vp = val;
    for (std::size_t r = 0; r < safe; ++r) {
      const std::size_t len = lens[r];
      const std::size_t o = owners[r];
      const std::size_t d = cursor[o];
      cursor[o] = d + len;
      float* dp = reinterpret_cast<float*>(out_b + sizeof(*out) * d);
      std::size_t k = 0;
      do {
        const __m128 iv =
            _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ip + k)));
        const __m128 vv = _mm_loadu_ps(vp + k);
        _mm_storeu_ps(dp + 2 * k, _mm_unpacklo_ps(iv, vv));
        _mm_storeu_ps(dp + 2 * k + 4, _mm_unpackhi_ps(iv, vv));
        k += 4;
      } while (k < len);
      ip += len;
      vp += len;
    }
  }
  for (std::size_t r = safe, p = tail; r < nr; ++r) {
    const std::size_t len = lens[r];
    const std::size_t o = owners[r];
    auto* d = out + cursor[o];
    cursor[o] += len;
    for (std::size_t k = 0; k < len; ++k) d[k] = {idx[p + k], val[p + k]};
    p += len;
  }
  // Repair: rewrite the first min(3, counts[j]) entries of every block j (in input order).
  std::size_t pending = 0;
  for (std::size_t j = 0; j < servers; ++j) {
    cursor[j] = std::min(kSlack, counts[j]);  // entries of block j still to rewrite
    pending += cursor[j];
  }
  for (std::size_t r = 0, p = 0; r < nr && pending > 0; p += lens[r], ++r) {
    const std::size_t o = owners[r];
    if (cursor[o] == 0) continue;
    const std::size_t take = std::min<std::size_t>(cursor[o], lens[r]);
    auto* d = out + first[o] + (std::min(kSlack, counts[o]) - cursor[o]);
    for (std::size_t k = 0; k < take; ++k) d[k] = {idx[p + k], val[p + k]};
    cursor[o] -= take;
    pending -= take;
  }
}

template <class Owner>
void partition_by_runs(const SparseGradient<std::uint32_t>& grad, const HashLayout& layout,
                       HashPartition<std::uint32_t>& part) {
  const std::size_t nnz = grad.nnz();
  const std::uint32_t servers = layout.servers();
  part.counts.assign(servers, 0);
  if (nnz == 0) {
    part.entries.clear();
    return;
  }
  std::unique_ptr<std::uint32_t[]> lens(new std::uint32_t[nnz]);  // uninitialised
  std::unique_ptr<Owner[]> owners(new Owner[nnz]);
  const std::size_t nr = find_runs<Owner>(grad.indices.data(), nnz, layout.owner_table().data(),
                                          lens.get(), owners.get(), part.counts.data());
  std::vector<std::size_t> cursor(servers);
  std::size_t at = 0;
  for (std::uint32_t j = 0; j < servers; ++j) {
    cursor[j] = at;
    at += part.counts[j];
  }
  part.entries.resize(nnz + 3);  // the SSE copy's slack, shrunk back (the allocation is kept)
  copy_runs<Owner>(grad.indices.data(), grad.values.data(), nnz, lens.get(), owners.get(), nr,
                   part.counts, cursor.data(), part.entries.data());
  part.entries.resize(nnz);
}
#endif

}  // namespace

template <class Index>
void zen_partition(const SparseGradient<Index>& grad, const HashLayout& layout,
                   HashPartition<Index>& part) {
#ifdef __SSSE3__
  if constexpr (std::is_same_v<Index, std::uint32_t>) {
    if (layout.servers() <= 256) {
      partition_by_runs<std::uint8_t>(grad, layout, part);
    } else {
      partition_by_runs<std::uint16_t>(grad, layout, part);
    }
    return;
  }
#endif
  partition_by_entries(grad, layout, part);
}

std::size_t HashLayout::granules_before(std::uint32_t server, std::uint64_t granule) const {
  const auto g = granules(server);
  return static_cast<std::size_t>(std::lower_bound(g.begin(), g.end(), granule) - g.begin());
}

template void zen_partition(const SparseGradient<std::uint32_t>&, const HashLayout&,
                            HashPartition<std::uint32_t>&);
template void zen_partition(const SparseGradient<std::uint64_t>&, const HashLayout&,
                            HashPartition<std::uint64_t>&);

}  // namespace atl::sync
