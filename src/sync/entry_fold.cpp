// A consumer's fold of a result's non-zeros: entry_fold.h. Each form has a portable loop and,
// for 32-bit indices and dense values, an AVX-512 one (chosen at run time as Zen's kernels are),
// so that no form is read with less care than another.
#include "atoll/sync/entry_fold.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "atoll/util/cpu_features.h"
#include "zen_wide.h"

namespace atl::sync {
namespace {

inline std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }
inline bool non_zero(std::uint32_t bits) { return (bits & 0x7FFFFFFFu) != 0; }

template <class Index>
EntryFold fold_entries_portable(const Index* idx, const float* val, std::size_t n) {
  EntryFold f;
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t b = bits_of(val[k]);
    if (!non_zero(b)) continue;
    f.sum += entry_term(static_cast<std::uint64_t>(idx[k]), b);
    ++f.count;
  }
  return f;
}

EntryFold fold_dense_portable(const float* val, std::size_t n, std::uint64_t first) {
  EntryFold f;
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t b = bits_of(val[k]);
    if (!non_zero(b)) continue;
    f.sum += entry_term(first + k, b);
    ++f.count;
  }
  return f;
}

#if ATOLL_HAVE_AVX512_KERNELS
using zen_wide::fold_sixteen;

ATOLL_AVX512 EntryFold fold_entries_wide(const std::uint32_t* idx, const float* val,
                                         std::size_t n) {
  __m512i acc = _mm512_setzero_si512();
  std::uint64_t count = 0;
  std::size_t k = 0;
  for (; k + 16 <= n; k += 16)
    fold_sixteen(_mm512_loadu_si512(idx + k), _mm512_loadu_si512(val + k), 0xFFFF, acc, count);
  if (k < n) {
    const auto rest = static_cast<__mmask16>((1u << (n - k)) - 1);
    fold_sixteen(_mm512_maskz_loadu_epi32(rest, idx + k), _mm512_maskz_loadu_epi32(rest, val + k),
                 rest, acc, count);
  }
  return EntryFold{zen_wide::lanes_sum(acc), count};
}

ATOLL_AVX512 EntryFold fold_dense_wide(const float* val, std::size_t n, std::uint64_t first) {
  __m512i acc = _mm512_setzero_si512();
  std::uint64_t count = 0;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  std::size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i i =
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first + k)), lane);  // low 32 bits
    fold_sixteen(i, _mm512_loadu_si512(val + k), 0xFFFF, acc, count);
  }
  if (k < n) {
    const auto rest = static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512i i = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first + k)), lane);
    fold_sixteen(i, _mm512_maskz_loadu_epi32(rest, val + k), rest, acc, count);
  }
  return EntryFold{zen_wide::lanes_sum(acc), count};
}
#endif

}  // namespace

template <class Index>
EntryFold fold_entries(const Index* idx, const float* val, std::size_t n) {
#if ATOLL_HAVE_AVX512_KERNELS
  if constexpr (std::is_same_v<Index, std::uint32_t>) {
    if (util::avx512_kernels()) return fold_entries_wide(idx, val, n);
  }
#endif
  return fold_entries_portable(idx, val, n);
}

EntryFold fold_dense(const float* val, std::size_t n, std::uint64_t first) {
#if ATOLL_HAVE_AVX512_KERNELS
  if (util::avx512_kernels()) return fold_dense_wide(val, n, first);
#endif
  return fold_dense_portable(val, n, first);
}

template <class Index>
EntryFold fold_result(const SyncResult<Index>& r) {
  if (r.folded) return *r.folded;
  if (r.dense_form) return fold_dense(r.dense.data(), r.dense.size(), 0);
  const std::size_t w = r.sparse.width;
  if (w == 1 && !r.in_views())
    return fold_entries(r.sparse.indices.data(), r.sparse.values.data(), r.sparse.nnz());
  EntryFold f;  // blocks of w values: dense runs of indices block·w, block·w + 1, ...
  for (std::size_t k = 0; k < r.sparse.indices.size(); ++k)
    f += fold_dense(r.block(k), w, static_cast<std::uint64_t>(r.sparse.indices[k]) * w);
  return f;
}

template EntryFold fold_entries(const std::uint32_t*, const float*, std::size_t);
template EntryFold fold_entries(const std::uint64_t*, const float*, std::size_t);
template EntryFold fold_result(const SyncResult<std::uint32_t>&);
template EntryFold fold_result(const SyncResult<std::uint64_t>&);

}  // namespace atl::sync
