// Sparse gradients in coordinate (COO) form.
//
// A SparseGradient<Index> holds a tensor of `elements` (M) float entries of which only the listed
// ones may be non-zero. Invariants (checked by validate()): indices sorted strictly increasing
// (hence unique), every index < M, indices.size() == values.size(). Explicit zero values are
// allowed. Index is std::uint32_t (M <= 2^32) or std::uint64_t.
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

  std::size_t nnz() const { return indices.size(); }
  double density() const { return elements ? static_cast<double>(nnz()) / elements : 0.0; }

  // nullopt if the invariants hold, else a message naming the first violation.
  std::optional<std::string> check() const;
  // Throws InvalidGradient with check()'s message.
  void validate() const;

  // The dense form (M floats). Meant for references and tests, not hot paths.
  std::vector<float> to_dense() const;
  // The non-zero entries of a dense vector (exact zeros are dropped).
  static SparseGradient from_dense(std::span<const float> dense);
};

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
