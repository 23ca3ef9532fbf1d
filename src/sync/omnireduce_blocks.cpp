#include "omnireduce_blocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "atoll/sync/scheme.h"
#include "common.h"

namespace atl::sync {
namespace {

// Calls on_record(sender, block id, payload) for every record; checks the framing and that each
// sender's ids lie in [lo(j), hi(j)).
template <class Index, class Lo, class Hi, class OnRecord>
void for_each_record(const char* what, std::span<const std::uint8_t> bytes,
                     std::span<const std::size_t> counts, std::uint64_t block_elements, Lo lo,
                     Hi hi, OnRecord on_record) {
  const std::size_t record = sizeof(Index) + block_elements * sizeof(float);
  std::size_t at = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] > bytes.size() - at || counts[j] % record != 0) {
      throw MalformedMessage(fmt::format(
          "omnireduce {}: malformed message from rank {}: {} bytes at offset {} of {} are not "
          "whole {}-byte block records",
          what, j, counts[j], at, bytes.size(), record));
    }
    for (const std::size_t end = at + counts[j]; at < end; at += record) {
      Index id;
      std::memcpy(&id, bytes.data() + at, sizeof(Index));
      if (id < lo(j) || id >= hi(j)) {
        throw MalformedMessage(
            fmt::format("omnireduce {}: malformed message from rank {}: block {} outside [{}, {})",
                        what, j, static_cast<std::uint64_t>(id), lo(j), hi(j)));
      }
      on_record(static_cast<std::uint64_t>(id), bytes.data() + at + sizeof(Index));
    }
  }
  if (at != bytes.size()) {
    throw MalformedMessage(fmt::format("omnireduce {}: {} bytes received, senders announced {}",
                                       what, bytes.size(), at));
  }
}

}  // namespace

template <class Index>
void omnireduce_aggregate(std::span<const std::uint8_t> received,
                          std::span<const std::size_t> counts, std::uint64_t first,
                          std::uint64_t count, std::uint64_t B, std::vector<float>& sums,
                          std::vector<std::uint8_t>& present) {
  sums.assign(count * B, 0.0f);
  present.assign(count, 0);
  for_each_record<Index>(
      "push", received, counts, B, [&](std::size_t) { return first; },
      [&](std::size_t) { return first + count; },
      [&](std::uint64_t id, const std::uint8_t* src) {
        const std::uint64_t local = id - first;
        present[local] = 1;
        float* dst = sums.data() + local * B;
        for (std::uint64_t e = 0; e < B; ++e) {
          float v;
          std::memcpy(&v, src + e * sizeof(float), sizeof(float));
          dst[e] += v;
        }
      });
}

template <class Index>
void omnireduce_decode_pull(std::span<const std::uint8_t> all, std::span<const std::size_t> counts,
                            std::uint64_t M, std::uint64_t B, std::vector<float>& dense) {
  const std::uint64_t blocks = (M + B - 1) / B;
  const auto n = static_cast<std::uint32_t>(counts.size());
  dense.assign(M, 0.0f);
  for_each_record<Index>(
      "pull", all, counts, B,
      [&](std::size_t j) { return range_begin(blocks, n, static_cast<std::uint32_t>(j)); },
      [&](std::size_t j) { return range_begin(blocks, n, static_cast<std::uint32_t>(j + 1)); },
      [&](std::uint64_t id, const std::uint8_t* src) {
        const std::uint64_t begin = id * B;
        const std::uint64_t len = std::min<std::uint64_t>(B, M - begin);
        std::memcpy(dense.data() + begin, src, len * sizeof(float));
      });
}

#define ATOLL_OMNIREDUCE_INSTANTIATE(I)                                                          \
  template void omnireduce_aggregate<I>(                                                         \
      std::span<const std::uint8_t>, std::span<const std::size_t>, std::uint64_t, std::uint64_t, \
      std::uint64_t, std::vector<float>&, std::vector<std::uint8_t>&);                           \
  template void omnireduce_decode_pull<I>(std::span<const std::uint8_t>,                         \
                                          std::span<const std::size_t>, std::uint64_t,           \
                                          std::uint64_t, std::vector<float>&);
ATOLL_OMNIREDUCE_INSTANTIATE(std::uint32_t)
ATOLL_OMNIREDUCE_INSTANTIATE(std::uint64_t)
#undef ATOLL_OMNIREDUCE_INSTANTIATE

}  // namespace atl::sync
