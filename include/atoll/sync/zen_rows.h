// Zen over rows (issue 18 item 7): a gradient of blocks of w consecutive values (an embedding
// table's rows; SparseGradient::width = w) synchronized with one index per row instead of one per
// value. The same algorithm as zen_partition.h's, one level up: the row is the unit of ownership
// (RowLayout: zen_owner's stratified hash at a granule of one row), the push carries
// [row ids][their w values each] per server, a server sums whole rows, and its pull block keys
// its rows by the hash bitmap over its row slots, their ids (COO) or Elias-Fano, chosen as for
// elements (zen_pull_format), followed by w values per row. Per row on the wire: 4 bytes of index
// (less with the bitmap) against 4·w in element form.
//
// Why one row, not 64, per granule: the element layout's granules of 64 indices are 64 values
// of one or a few rows, but 64 rows are 64·w values, and the hot rows of an embedding (small ids:
// frequent words) then land on one server: on the real 16-worker traces (w = 1024) granules of 64
// rows gave a push imbalance of 4.37 (measured). With one row per granule every server owns
// exactly one row of each stratum of n consecutive rows, so slot(row) = row / n and no table is
// needed.
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

// Ownership of R rows by n servers: in stratum s (rows s·n .. s·n + n − 1) row s·n + i belongs to
// server (i + r_s) mod n, r_s = h0(s) scaled to [0, n) (zen_owner's rotation). Server j's slot of
// a row is its stratum; it has slots() slots (the last stratum may stop short of n rows).
class RowLayout {
 public:
  RowLayout() = default;
  RowLayout(std::uint64_t rows, std::uint32_t servers, std::uint64_t seed)
      : rows_(rows), servers_(servers), seed_(seed) {}
  std::uint64_t rows() const { return rows_; }
  std::uint32_t servers() const { return servers_; }
  std::size_t slots() const { return static_cast<std::size_t>((rows_ + servers_ - 1) / servers_); }
  std::uint32_t rotation(std::uint64_t stratum) const {
    return static_cast<std::uint32_t>(
        (static_cast<unsigned __int128>(zen_hash(stratum, seed_) >> 32) * servers_) >> 32);
  }
  std::uint32_t owner(std::uint64_t row) const {
    const std::uint64_t stratum = row / servers_;
    const std::uint32_t o =
        static_cast<std::uint32_t>(row - stratum * servers_) + rotation(stratum);
    return o >= servers_ ? o - servers_ : o;
  }
  std::size_t slot(std::uint64_t row) const { return static_cast<std::size_t>(row / servers_); }
  // The row server j holds in slot s (may be >= rows() in the last stratum).
  std::uint64_t row_of(std::uint32_t server, std::size_t s) const {
    const std::uint32_t r = rotation(s);
    const std::uint32_t i = server >= r ? server - r : server + servers_ - r;
    return static_cast<std::uint64_t>(s) * servers_ + i;
  }

 private:
  std::uint64_t rows_ = 0;
  std::uint32_t servers_ = 0;
  std::uint64_t seed_ = 0;
};

// A local gradient of rows grouped by owner, ready for one alltoallv of bytes: server j's part is
// bytes[offset_j, offset_j + counts[j]) = its rows' ids (Index each, increasing) then their values
// (w floats per row, in the same order).
template <class Index>
struct RowPartition {
  std::vector<std::size_t> counts;  // bytes per server
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint32_t> owners;  // scratch: each row's owner
};

// Counting sort of grad's rows by owner (layout over grad.blocks() rows, grad.width > 0).
template <class Index>
void zen_row_partition(const SparseGradient<Index>& grad, const RowLayout& layout,
                       RowPartition<Index>& part);

// A server's row sums: which of its row slots hold a sum (bit s of words) and where its values are
// (values[pos[s]·w, +w), in the order the rows first arrived).
struct ZenRowSums {
  std::uint32_t width = 0;
  std::vector<std::uint64_t> words;  // over the server's row slots
  std::vector<std::uint32_t> pos;    // per slot; valid where its bit is set
  std::vector<float> values;
  std::uint64_t rows = 0;
  std::uint64_t rows_in(std::size_t s0, std::size_t s1) const;  // rows in slots [s0, s1)
};

// Checks and sums what `server` received (counts[j] bytes from rank j, concatenated): each part a
// whole number of rows, every row id below R, owned by `server`, increasing within the part.
// MalformedMessage naming the sender otherwise.
template <class Index>
void zen_row_aggregate(const RowLayout& layout, std::uint32_t server, std::uint32_t width,
                       std::span<const std::uint8_t> received, std::span<const std::size_t> counts,
                       ZenRowSums& sums);

// The bits of a server's key over all its slots (rounded up to whole 64-bit words) and the size
// of a pull block over `strata` strata (its key: that many bits rounded up to whole words)
// holding `rows` rows.
std::size_t zen_row_key_bits(const RowLayout& layout);
std::size_t zen_row_block_bytes(std::size_t strata, std::uint64_t rows, std::uint32_t width,
                                std::size_t index_bytes, PullCoding coding);

// The pull travels in chunks of strata [s0, s1) (slots s0..s1-1 of every server: rows
// s0·n .. s1·n - 1), so that receivers decode chunk p while chunk p + 1 is on the wire; a chunk's
// block keys the server's slots in those strata only (bit 0 = stratum s0; Elias-Fano positions
// relative to s0).
//
// Appends the server's block of chunk [s0, s1): [u8 format][u64 rows][key: bitmap | ids |
// Elias-Fano][0-3 zero bytes: the values start at a multiple of 4 bytes][w values per row, in slot
// order]; returns its size (= zen_row_block_bytes, a multiple of 4).
template <class Index>
std::size_t zen_row_encode(const RowLayout& layout, std::uint32_t server, const ZenRowSums& sums,
                           PullCoding coding, std::size_t s0, std::size_t s1,
                           std::vector<std::uint8_t>& block);
// The one-chunk block (all the server's slots).
template <class Index>
std::size_t zen_row_encode(const RowLayout& layout, std::uint32_t server, const ZenRowSums& sums,
                           PullCoding coding, std::vector<std::uint8_t>& block);

// Receiver: chunk [s0, s1) of every server (block j: counts[j] bytes, announced rows[j] rows with
// coding codings[j]), concatenated, into oi / ov (rows in increasing order, w values each; room
// for `capacity` rows); returns the rows written. MalformedMessage naming the server on a block
// that does not decode (size, format, count, an id not the server's or not in the chunk, a bit
// past R, padding not zero) or more than `capacity` rows.
// With `views`, the values are not copied (ov is unused): views[k] points at row k's w values
// inside `blocks`, which must then be 4-byte aligned and hold floats (storage of float objects
// seen as bytes), and outlive the views.
template <class Index>
std::size_t zen_row_decode_chunk(const RowLayout& layout, std::uint32_t width, std::size_t s0,
                                 std::size_t s1, std::span<const std::uint8_t> blocks,
                                 std::span<const std::size_t> counts,
                                 std::span<const std::uint64_t> rows,
                                 std::span<const PullCoding> codings, Index* oi, float* ov,
                                 std::size_t capacity, const float** views = nullptr);
// One chunk over all the strata into `out` (width w).
template <class Index>
void zen_row_decode(const RowLayout& layout, std::uint32_t width,
                    std::span<const std::uint8_t> blocks, std::span<const std::size_t> counts,
                    std::span<const std::uint64_t> rows, std::span<const PullCoding> codings,
                    SparseGradient<Index>& out);

}  // namespace atl::sync
