// SparCML's accumulator and its wire format (src/sync/sparcml.cpp runs the rounds). The decoder
// takes bytes from a peer: pure, no communicator, so tests and fuzz/sparcml.cpp call it directly.
//   [u8 form: 0 sparse, 1 dense][u64 count][sparse: count indices][count float values]
// A sparse message holds strictly increasing indices below M; a dense one exactly M values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/sync/scheme.h"

namespace atl::sync {

template <class Index>
struct SparcmlAccumulator {
  bool dense = false;
  std::vector<Index> idx;
  std::vector<float> val;  // sparse values, or M dense floats
};

// The largest message over M elements (M sparse entries): a larger announced size is refused
// before the receive buffer is allocated.
template <class Index>
constexpr std::uint64_t sparcml_max_message_bytes(std::uint64_t elements) {
  return 9 + elements * (sizeof(Index) + sizeof(float));
}

// A message size announced by `sender` (the fold's size message): MalformedMessage if it exceeds
// sparcml_max_message_bytes.
template <class Index>
std::uint64_t sparcml_checked_size(std::uint64_t size, std::uint64_t elements, int sender);

template <class Index>
std::vector<std::uint8_t> sparcml_encode(const SparcmlAccumulator<Index>& a);

// Throws MalformedMessage naming `sender` when the bytes are not a message over M elements as
// described above (wrong form, count, size, trailing bytes, index unsorted or >= M).
template <class Index>
SparcmlAccumulator<Index> sparcml_decode(std::span<const std::uint8_t> bytes,
                                         std::uint64_t elements, int sender);

// mine += other over M elements (both valid for M). Both partners of a round compute the same sum
// (float addition commutes) and take the same dense/sparse decision, so they stay identical.
template <class Index>
void sparcml_accumulate(SparcmlAccumulator<Index>& mine, SparcmlAccumulator<Index>&& other,
                        std::uint64_t elements, double dense_switch);

}  // namespace atl::sync
