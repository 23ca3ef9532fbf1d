// Zen's push without counts, headed by each sender's input verdict (zen_push_verdict.h).
#include "zen_push_verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace atl::sync {

template <class Index>
PushVerdicts zen_push_with_verdict(comm::Communicator& comm, const HashPartition<Index>* part,
                                   const PushVerdict& mine, std::size_t bound_entries,
                                   std::size_t entry_bytes, VerdictPushBuffers& b,
                                   std::vector<sparse::Entry<Index>>& received,
                                   std::vector<std::size_t>& recv_counts) {
  using E = sparse::Entry<Index>;
  constexpr std::size_t H = sizeof(PushVerdict);
  const auto n = static_cast<std::size_t>(comm.size());
  b.send_bytes.assign(n, H);
  std::size_t total = n * H;
  if (part) {
    for (std::size_t r = 0; r < n; ++r) b.send_bytes[r] += part->counts[r] * sizeof(E);
    total += part->entries.size() * sizeof(E);
  }
  if (b.send.size() < total) b.send.resize(total);
  std::size_t at = 0, from = 0;
  for (std::size_t r = 0; r < n; ++r) {
    std::memcpy(b.send.data() + at, &mine, H);
    const std::size_t bytes = b.send_bytes[r] - H;
    if (bytes) std::memcpy(b.send.data() + at + H, part->entries.data() + from, bytes);
    from += bytes / sizeof(E);
    at += b.send_bytes[r];
  }
  b.bound_bytes.assign(n, H + bound_entries * entry_bytes);
  if (b.recv.size() < n * b.bound_bytes[0]) b.recv.resize(n * b.bound_bytes[0]);
  const auto got = comm.alltoallv_bounded<std::uint8_t>(
      std::span<const std::uint8_t>(b.send.data(), at), b.send_bytes, b.bound_bytes, b.recv);
  PushVerdicts v;
  v.all = InputVerdicts{false, ~std::uint64_t{0}, 0, ~std::uint64_t{0}, 0};
  for (std::size_t r = 0; r < n; ++r) {
    if (got[r] < H) {
      throw MalformedMessage(fmt::format(
          "zen: rank {} sent a push message of {} bytes, shorter than its {}-byte header", r,
          got[r], H));
    }
    PushVerdict theirs;
    std::memcpy(&theirs, b.recv.data() + r * b.bound_bytes[0], H);
    v.all.failed = v.all.failed || (theirs.flags & PushVerdict::kFailed) != 0;
    v.changed = v.changed || (theirs.flags & PushVerdict::kChanged) != 0;
    v.all.min_elements = std::min(v.all.min_elements, theirs.elements);
    v.all.max_elements = std::max(v.all.max_elements, theirs.elements);
    v.all.min_width = std::min<std::uint64_t>(v.all.min_width, theirs.width);
    v.all.max_width = std::max<std::uint64_t>(v.all.max_width, theirs.width);
  }
  // A rank that failed or changed form: the entries (perhaps of another index width) are unread.
  recv_counts.assign(n, 0);
  received.clear();
  if (v.all.failed || v.changed) return v;
  std::size_t entries = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if ((got[r] - H) % sizeof(E) != 0) {
      throw MalformedMessage(
          fmt::format("zen: rank {} sent a push message of {} bytes: a {}-byte header, then not "
                      "whole entries of {} bytes",
                      r, got[r], H, sizeof(E)));
    }
    recv_counts[r] = (got[r] - H) / sizeof(E);
    entries += recv_counts[r];
  }
  received.resize(entries);
  std::size_t k = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (recv_counts[r])
      std::memcpy(received.data() + k, b.recv.data() + r * b.bound_bytes[0] + H,
                  recv_counts[r] * sizeof(E));
    k += recv_counts[r];
  }
  return v;
}

template PushVerdicts zen_push_with_verdict(comm::Communicator&,
                                            const HashPartition<std::uint32_t>*, const PushVerdict&,
                                            std::size_t, std::size_t, VerdictPushBuffers&,
                                            std::vector<sparse::Entry<std::uint32_t>>&,
                                            std::vector<std::size_t>&);
template PushVerdicts zen_push_with_verdict(comm::Communicator&,
                                            const HashPartition<std::uint64_t>*, const PushVerdict&,
                                            std::size_t, std::size_t, VerdictPushBuffers&,
                                            std::vector<sparse::Entry<std::uint64_t>>&,
                                            std::vector<std::size_t>&);

}  // namespace atl::sync
