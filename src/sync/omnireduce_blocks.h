// OmniReduce's block records as received from peers (src/sync/omnireduce.cpp runs the exchange).
// A record is [Index block id][B float values]; block b covers elements [b·B, min((b+1)·B, M)).
// Aggregator r owns blocks [range_begin(blocks, n, r), range_begin(blocks, n, r + 1)).
// Pure functions, no communicator: tests and fuzz/omnireduce.cpp call them directly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace atl::sync {

// Aggregator side: sums the records received (counts[j] bytes from rank j) into `sums`
// (count·B floats, block first + l at l·B) and marks present[l] for every block received.
// MalformedMessage naming the sender when a rank's bytes are not whole records or a block id is
// outside [first, first + count).
template <class Index>
void omnireduce_aggregate(std::span<const std::uint8_t> received,
                          std::span<const std::size_t> counts, std::uint64_t first,
                          std::uint64_t count, std::uint64_t block_elements,
                          std::vector<float>& sums, std::vector<std::uint8_t>& present);

// Receiver side of the pull: writes every record of `all` (counts[j] bytes from aggregator j)
// into `dense` (M floats, zero-filled first). MalformedMessage naming the aggregator when its
// bytes are not whole records or a block id is not one it owns.
template <class Index>
void omnireduce_decode_pull(std::span<const std::uint8_t> all, std::span<const std::size_t> counts,
                            std::uint64_t elements, std::uint64_t block_elements,
                            std::vector<float>& dense);

}  // namespace atl::sync
