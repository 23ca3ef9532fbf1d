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
// with one owner; at most 64 entries since indices are unique). Pass 1 finds the runs of each
// 64-entry block as a bit mask (SSE compares of neighbouring granules) and walks its bits: one
// owner lookup and one counter update per run, lengths and owners recorded. Pass 2 copies each run
// to its server's cursor with 4-entry SSE stores (index and value vectors interleaved by
// unpacklo/unpackhi). Stores are 4 entries wide and may run up to 3 entries past the run: inside
// the server's block those entries are rewritten by the server's next runs (runs are copied in
// input order); past the block's end they can only reach the first 3 entries of the following
// blocks (rewritten exactly at the end) or 3 entries of slack past the last block (dropped).
template <class Owner>
void partition_by_runs(const SparseGradient<std::uint32_t>& grad, const HashLayout& layout,
                       HashPartition<std::uint32_t>& part) {
  constexpr std::size_t kSlack = 3;
  const std::size_t nnz = grad.nnz();
  const std::uint32_t servers = layout.servers();
  const std::uint16_t* table = layout.owner_table().data();
  const std::uint32_t* idx = grad.indices.data();
  const float* val = grad.values.data();
  part.counts.assign(servers, 0);
  if (nnz == 0) {
    part.entries.clear();
    return;
  }
  part.entries.resize(nnz + kSlack);  // shrunk back at the end (the allocation is kept)
  std::unique_ptr<std::uint32_t[]> lens_buf(new std::uint32_t[nnz]);  // uninitialised
  std::unique_ptr<Owner[]> owners_buf(new Owner[nnz]);
  std::uint32_t* lens = lens_buf.get();
  Owner* owners = owners_buf.get();
  std::size_t* counts = part.counts.data();

  // Pass 1: runs, their owners and the per-server counts.
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

  std::vector<std::size_t> cursor_buf(2 * static_cast<std::size_t>(servers));
  std::size_t* cursor = cursor_buf.data();
  std::size_t* first = cursor + servers;
  std::size_t at = 0;
  for (std::uint32_t j = 0; j < servers; ++j) {
    cursor[j] = first[j] = at;
    at += counts[j];
  }

  // Pass 2: copy the runs. Runs [0, safe) end at or before `tail` and tail + 3 <= nnz, so their
  // 4-wide loads stay inside the input; the last few runs are copied entry by entry.
  auto* out = part.entries.data();
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
  for (std::uint32_t j = 0; j < servers; ++j) {
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

using zen_blocks::format_key_bytes;
using zen_blocks::kBitmap;
using zen_blocks::kBlockHeader;
using zen_blocks::kCoo;
using zen_blocks::kEliasFano;
using zen_blocks::kEliasFanoComplement;

std::vector<std::uint64_t> zen_granule_bounds(std::uint64_t elements, std::uint32_t parts) {
  if (parts == 0) throw std::invalid_argument("zen_granule_bounds: parts must be positive");
  const std::uint64_t granules = (elements + kZenGranule - 1) / kZenGranule;
  std::vector<std::uint64_t> bounds(parts + 1);
  for (std::uint32_t p = 0; p <= parts; ++p) bounds[p] = granules * p / parts;
  return bounds;
}

std::uint32_t zen_pull_buckets(std::uint64_t elements) {
  const std::uint64_t granules = (elements + kZenGranule - 1) / kZenGranule;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(granules / 64, 1, 256));
}

std::size_t HashLayout::granules_before(std::uint32_t server, std::uint64_t granule) const {
  const auto g = granules(server);
  return static_cast<std::size_t>(std::lower_bound(g.begin(), g.end(), granule) - g.begin());
}

std::uint8_t zen_pull_format(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                             PullCoding coding) {
  const std::size_t coo = format_key_bytes(kCoo, slots, nnz, index_bytes);
  const std::size_t bitmap = format_key_bytes(kBitmap, slots, nnz, index_bytes);
  switch (coding) {
    case PullCoding::coo:
      return kCoo;
    case PullCoding::bitmap_or_coo:
      return coo * kZenCooKeyShare <= bitmap ? kCoo : kBitmap;
    case PullCoding::smallest: {
      // Ties go to the format that decodes faster: bitmap, indices, then Elias-Fano.
      const std::size_t ef = format_key_bytes(kEliasFano, slots, nnz, index_bytes);
      const std::size_t efc = format_key_bytes(kEliasFanoComplement, slots, nnz, index_bytes);
      const std::size_t least = std::min({bitmap, coo, ef, efc});
      if (bitmap == least) return kBitmap;
      if (coo == least) return kCoo;
      return ef == least ? kEliasFano : kEliasFanoComplement;
    }
    case PullCoding::elias_fano:
      return kEliasFano;
    case PullCoding::elias_fano_complement:
      return kEliasFanoComplement;
  }
  throw std::invalid_argument("zen: unknown pull coding");
}

std::size_t zen_pull_key_bytes(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                               PullCoding coding) {
  return format_key_bytes(zen_pull_format(slots, nnz, index_bytes, coding), slots, nnz,
                          index_bytes);
}

std::size_t zen_pull_block_bytes(std::size_t slots, std::uint64_t nnz, std::size_t index_bytes,
                                 PullCoding coding) {
  return kBlockHeader + zen_pull_key_bytes(slots, nnz, index_bytes, coding) + nnz * sizeof(float);
}

std::size_t zen_pull_block_bound(std::size_t slots, std::size_t index_bytes) {
  // Elias-Fano of k of U positions takes k·(L + 1) + U / 2^L bits with L = floor(log2(U / k)),
  // so k <= U / 2^L gives at most U·(L + 2) / 2^L <= 2U bits, U / 4 bytes, plus its padding (of
  // the empty slots alike); the bitmap is U / 8 bytes, the indices k·index_bytes.
  return kBlockHeader + slots * index_bytes + slots / 8 + 64 + slots * sizeof(float);
}

bool zen_exchanges_without_counts(std::uint64_t elements, std::uint32_t servers,
                                  std::size_t index_bytes, std::uint64_t min_block_bytes) {
  if (min_block_bytes == 0 || servers == 0) return false;
  // The bound is affine in the slots, and the servers' slots are the granules' (each granule has
  // one owner): the sum of the servers' bounds.
  const std::uint64_t slots = (elements + kZenGranule - 1) / kZenGranule * kZenGranule;
  const double total = static_cast<double>(zen_pull_block_bound(slots, index_bytes)) +
                       static_cast<double>(servers - 1) * zen_pull_block_bound(0, index_bytes);
  return total <= static_cast<double>(servers) * static_cast<double>(min_block_bytes);
}

namespace {

// The pull's bytes per bucket as the chunking weighs them: 8 bytes of bitmap per granule, 4 per
// non-zero value of every server; refuses counts that do not match the buckets and servers.
std::vector<double> pull_bucket_weights(const HashLayout& layout,
                                        std::span<const std::uint64_t> bucket_bounds,
                                        std::span<const std::uint64_t> bucket_nnz,
                                        std::uint32_t chunks, const char* caller) {
  if (bucket_bounds.size() < 2 || chunks == 0 ||
      bucket_nnz.size() != (bucket_bounds.size() - 1) * layout.servers()) {
    throw std::invalid_argument(
        fmt::format("{}: {} bucket bounds, {} counts for {} servers, {} chunks", caller,
                    bucket_bounds.size(), bucket_nnz.size(), layout.servers(), chunks));
  }
  const std::size_t H = bucket_bounds.size() - 1;
  std::vector<double> weight(H);
  for (std::size_t b = 0; b < H; ++b) {
    double w = 8.0 * static_cast<double>(bucket_bounds[b + 1] - bucket_bounds[b]);
    for (std::uint32_t j = 0; j < layout.servers(); ++j)
      w += 4.0 * static_cast<double>(bucket_nnz[j * H + b]);
    weight[b] = w;
  }
  return weight;
}

// As many chunks as keep total / (servers x chunks) >= min_block_bytes, 1 to max_chunks.
}  // namespace

std::uint32_t zen_pull_chunks_for(double total, std::uint32_t servers, std::uint32_t max_chunks,
                                  std::uint64_t min_block_bytes) {
  if (min_block_bytes == 0) return max_chunks;
  const double fit = total / (static_cast<double>(servers) * static_cast<double>(min_block_bytes));
  if (fit < 1) return 1;
  return fit >= max_chunks ? max_chunks : static_cast<std::uint32_t>(fit);
}

std::uint64_t zen_pull_min_block(std::uint64_t configured, double latency_s,
                                 double bandwidth_bytes_per_s, std::uint32_t servers) {
  if (configured == 0 || servers < 2) return configured;
  // A rank receives servers − 1 blocks of a chunk through its link.
  const double bdp = latency_s * bandwidth_bytes_per_s / (servers - 1.0);
  return bdp > static_cast<double>(configured) ? static_cast<std::uint64_t>(bdp) : configured;
}

std::vector<std::uint64_t> zen_balanced_chunks(const HashLayout& layout,
                                               std::span<const std::uint64_t> bucket_bounds,
                                               std::span<const std::uint64_t> bucket_nnz,
                                               std::uint32_t max_chunks,
                                               std::uint64_t min_block_bytes) {
  const auto weight =
      pull_bucket_weights(layout, bucket_bounds, bucket_nnz, max_chunks, "zen_balanced_chunks");
  const std::size_t H = weight.size();
  double total = 0;
  for (const double w : weight) total += w;
  const std::uint32_t chunks =
      zen_pull_chunks_for(total, layout.servers(), max_chunks, min_block_bytes);
  std::vector<std::uint64_t> bounds{bucket_bounds[0]};
  double acc = 0;
  std::uint32_t next = 1;
  for (std::size_t b = 0; b < H; ++b) {
    acc += weight[b];
    if (next < chunks && b + 1 < H && acc >= total * next / chunks) {
      bounds.push_back(bucket_bounds[b + 1]);
      while (next < chunks && acc >= total * next / chunks) ++next;
    }
  }
  bounds.push_back(bucket_bounds[H]);
  return bounds;
}

std::uint32_t zen_pull_chunk_count(const HashLayout& layout,
                                   std::span<const std::uint64_t> bucket_bounds,
                                   std::span<const std::uint64_t> bucket_nnz,
                                   std::uint32_t max_chunks, std::uint64_t min_block_bytes) {
  const auto weight =
      pull_bucket_weights(layout, bucket_bounds, bucket_nnz, max_chunks, "zen_pull_chunk_count");
  double total = 0;
  for (const double w : weight) total += w;
  return zen_pull_chunks_for(total, layout.servers(), max_chunks, min_block_bytes);
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

template void zen_partition(const SparseGradient<std::uint32_t>&, const HashLayout&,
                            HashPartition<std::uint32_t>&);
template void zen_partition(const SparseGradient<std::uint64_t>&, const HashLayout&,
                            HashPartition<std::uint64_t>&);
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
