// Sparse gradients in coordinate (COO) form.
//
// A SparseGradient<Index> holds a tensor of `elements` (M) float entries of which only the listed
// ones may be non-zero. Invariants (checked by validate()): indices sorted strictly increasing
// (hence unique), every index < M, indices.size() == values.size(). Explicit zero values are
// allowed. Index is std::uint32_t (M <= 2^32) or std::uint64_t.
//
// Blocks (issue 18 item 7): with width w > 1 every index names a block of w consecutive elements
// (elements [index·w, index·w + w), e.g. one row of an embedding table), and values holds w values
// per index, block after block: M % w == 0, every index < M / w, values.size() == w·nnz(). An
// embedding gradient then carries one index per row instead of one per value. Schemes that take
// blocks natively say so (SyncScheme::takes_blocks); the others are given the element form
// (expand_blocks).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace atl::sparse {

// Bad user-supplied data (an index out of range, unsorted indices, a corrupt trace...).
class InvalidGradient : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class Index>
struct SparseGradient {
  static_assert(std::is_same_v<Index, std::uint32_t> || std::is_same_v<Index, std::uint64_t>);
  using index_type = Index;

  std::uint64_t elements = 0;  // M: the dense size of the tensor
  std::vector<Index> indices;
  std::vector<float> values;
  std::uint32_t width = 1;  // values per index (a block of consecutive elements)

  // Indices held (blocks when width > 1); value_count() is the values held.
  std::size_t nnz() const { return indices.size(); }
  std::size_t value_count() const { return values.size(); }
  std::uint64_t blocks() const { return width ? elements / width : 0; }  // M / w
  double density() const { return elements ? static_cast<double>(value_count()) / elements : 0.0; }

  // nullopt if the invariants hold, else a message naming the first violation.
  std::optional<std::string> check() const;
  // Throws InvalidGradient with check()'s message.
  void validate() const;

  // The dense form (M floats). Meant for references and tests, not hot paths.
  std::vector<float> to_dense() const;
  // The non-zero entries of a dense vector (exact zeros are dropped).
  static SparseGradient from_dense(std::span<const float> dense);
};

// The element form (width 1) of a gradient of blocks: every value of every block, zeros included.
// `out` is overwritten (reusing its buffers).
template <class Index>
void expand_blocks(const SparseGradient<Index>& grad, SparseGradient<Index>& out);
// The block form of width w of an element-form gradient (M % w == 0): every block holding at least
// one listed index, its unlisted elements as explicit zeros. Exact: the same dense vector.
template <class Index>
SparseGradient<Index> group_blocks(const SparseGradient<Index>& grad, std::uint32_t width);

// The largest M representable with this index type.
template <class Index>
constexpr std::uint64_t max_elements() {
  return std::is_same_v<Index, std::uint32_t> ? (std::uint64_t{1} << 32) : ~std::uint64_t{0};
}

// Sum of sorted sparse gradients by merging (the scalar reference used by several schemes).
// Entries whose sum is exactly 0 are kept: the result's indices are the union of the inputs'.
template <class Index>
void merge_add(std::span<const Index> a_idx, std::span<const float> a_val,
               std::span<const Index> b_idx, std::span<const float> b_val,
               std::vector<Index>& out_idx, std::vector<float>& out_val);

extern template struct SparseGradient<std::uint32_t>;
extern template struct SparseGradient<std::uint64_t>;

}  // namespace atl::sparse

namespace atl::sparse {

// One COO entry as it travels on the wire: packed, 8 bytes for 32-bit indices, 12 for 64-bit.
template <class Index>
struct __attribute__((packed)) Entry {
  Index index;
  float value;
};

}  // namespace atl::sparse
