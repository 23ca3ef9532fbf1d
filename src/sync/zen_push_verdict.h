// Zen's push without counts (zen.cpp, where push and pull need no counts first), each message
// headed by its sender's input verdict: once two calls in a row of one form have been checked on
// every rank and went this way, the next calls need no check round of their own (a latency each,
// across a WAN). A rank whose input no longer fits the agreed form (M, block width, index width,
// ranks) says so in its header and sends no entries; every rank then sees every header and falls
// back together.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"

namespace atl::sync {

// 16 bytes at the head of every push message.
struct PushVerdict {
  static constexpr std::uint32_t kFailed = 1;   // this rank's input has a problem
  static constexpr std::uint32_t kChanged = 2;  // its input differs from the agreed form
  std::uint32_t flags = 0;
  std::uint32_t width = 1;
  std::uint64_t elements = 0;
};

// What every rank said, the same on every rank.
struct PushVerdicts {
  InputVerdicts all;
  bool changed = false;
};

// Buffers reused between calls (sized once: no zero-filling per call).
struct VerdictPushBuffers {
  std::vector<std::uint8_t> send, recv;
  std::vector<std::size_t> send_bytes, bound_bytes;
};

// Sends `mine` and part's block for each server (`part` null: the header alone) in one exchange,
// every sender's block to this server being at most `bound_entries` entries of `entry_bytes` (the
// agreed index width's Entry) after its header. Fills `received` with the entries (in rank order)
// and `recv_counts` with each rank's count, and returns every rank's verdict (where a rank failed
// or changed form, nothing received: the entries may be of another index width). A message
// shorter than its header or not whole entries: MalformedMessage naming the sender.
template <class Index>
PushVerdicts zen_push_with_verdict(comm::Communicator& comm, const HashPartition<Index>* part,
                                   const PushVerdict& mine, std::size_t bound_entries,
                                   std::size_t entry_bytes, VerdictPushBuffers& buffers,
                                   std::vector<sparse::Entry<Index>>& received,
                                   std::vector<std::size_t>& recv_counts);

}  // namespace atl::sync
