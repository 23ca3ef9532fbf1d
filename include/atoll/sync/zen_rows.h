// Zen over rows (issue 18 item 7): a gradient of blocks of w consecutive values (an embedding
// table's rows; SparseGradient::width = w) synchronized with one index per row instead of one per
// value. The same algorithm as zen_partition.h's, one level up: the row is the unit of ownership
// (zen_owner over the R = M / w row ids, in granules of 64 rows), the push carries
// [row ids][their w values each] per server, a server sums whole rows, and its pull block keys
// its rows by the hash bitmap over its row slots, their ids (COO) or Elias-Fano, chosen as for
// elements (zen_pull_format), followed by w values per row. Per row on the wire: 4 bytes of index
// (less with the bitmap) against 4·w in element form.
//
// The building blocks below are what src/sync/zen.cpp runs when a gradient of blocks arrives;
// they are exact (whole rows are summed in the order received, as elements are) and refuse a
// malformed message naming the sender.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/sparse/sparse_gradient.h"
#include "atoll/sync/zen_partition.h"

namespace atl::sync {

// A local gradient of rows grouped by owner, ready for one alltoallv of bytes: server j's part is
// bytes[offset_j, offset_j + counts[j]) = its rows' ids (Index each, increasing) then their values
// (w floats per row, in the same order).
template <class Index>
struct RowPartition {
  std::vector<std::size_t> counts;  // bytes per server
  std::vector<std::uint8_t> bytes;
};

// Counting sort of grad's rows by owner (layout over grad.blocks() rows, grad.width > 0).
template <class Index>
void zen_row_partition(const SparseGradient<Index>& grad, const HashLayout& layout,
                       RowPartition<Index>& part);

// A server's row sums: which of its row slots hold a sum (bit s of words) and where its values are
// (values[pos[s]·w, +w), in the order the rows first arrived).
struct ZenRowSums {
  std::uint32_t width = 0;
  std::vector<std::uint64_t> words;  // over the server's row slots
  std::vector<std::uint32_t> pos;    // per slot; valid where its bit is set
  std::vector<float> values;
  std::uint64_t rows = 0;
};

// Checks and sums what `server` received (counts[j] bytes from rank j, concatenated): each part a
// whole number of rows, every row id below R, owned by `server`, increasing within the part.
// MalformedMessage naming the sender otherwise.
template <class Index>
void zen_row_aggregate(const HashLayout& layout, std::uint32_t server, std::uint32_t width,
                       std::span<const std::uint8_t> received, std::span<const std::size_t> counts,
                       ZenRowSums& sums);

// The size of server j's pull block of `rows` rows over `slots` row slots.
std::size_t zen_row_block_bytes(std::size_t slots, std::uint64_t rows, std::uint32_t width,
                                 std::size_t index_bytes, PullCoding coding);
// Appends the server's pull block: [u8 format][u64 rows][key: bitmap | ids | Elias-Fano over the
// slots][w values per row, in slot order]; returns its size (= zen_row_block_bytes).
template <class Index>
std::size_t zen_row_encode(const HashLayout& layout, std::uint32_t server, const ZenRowSums& sums,
                           PullCoding coding, std::vector<std::uint8_t>& block);

// Receiver: every server's block (block j: counts[j] bytes, announced rows[j] rows with coding
// codings[j]), concatenated, into `out` (width w, rows in increasing order). std::runtime_error
// naming the server on a block that does not decode (size, format, count, an id not the
// server's, a bit past R).
template <class Index>
void zen_row_decode(const HashLayout& layout, std::uint32_t width,
                    std::span<const std::uint8_t> blocks, std::span<const std::size_t> counts,
                    std::span<const std::uint64_t> rows, std::span<const PullCoding> codings,
                    SparseGradient<Index>& out);

}  // namespace atl::sync
