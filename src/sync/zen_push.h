// Zen's push (step 2 of zen.cpp): every rank's hash partition to the servers that own it.
//
// Flat (group 1): one alltoall of counts and one alltoallv of entries, n - 1 messages per rank
// each way.
//
// Grouped (group G > 1 dividing n; ranks g·G .. g·G + G - 1 form group g, a node's ranks when
// G is the ranks per node): two exchanges of fewer messages.
//  1. within the group: the rank of local index l collects, from its G - 1 peers, their blocks
//     for the servers of local index l (servers l, G + l, 2G + l, ...), and sums them per server
//     (a merge of the G sorted blocks, so a non-zero the group shares crosses the next step once);
//  2. between groups: rank (g, l) sends server (g', l) that sum, over the communicator of the
//     ranks of local index l.
// Messages per rank (G - 1) + (n/G - 1) instead of n - 1; the bytes between groups shrink by the
// group's overlap (under Zipf, many). The result is the same sum as the flat push's (float
// additions in another order).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/zen_partition.h"
#include "zen_merge.h"

namespace atl::sync {

using comm::Communicator;
using sparse::Entry;

class ZenPush {
 public:
  // group: ranks per group (1: flat; 0: the ranks per node when every node has as many and there
  // is more than one node, flat otherwise). merge_op: the cpu cost operation charged for the
  // grouped push's reorder and merge (cpu_costs.h).
  ZenPush(std::uint32_t group, std::size_t merge_op);

  // Sends `part` (layout.servers() == comm.size()) and fills `received` with what this server
  // gets, `recv_counts[r]` entries from rank r (zero for the ranks that sent nothing; the grouped
  // push's blocks come from one rank per group). Every received index is this server's, checked
  // by the caller. The grouped push's traffic on its sub-communicators is added to comm's.
  // A group that does not divide n: std::invalid_argument on every rank, before any message.
  template <class Index>
  void run(Communicator& comm, HashPartition<Index>& part, std::vector<Entry<Index>>& received,
           std::vector<std::size_t>& recv_counts);

  // The group size this push uses on `comm` (1 when flat); collective when group is 0.
  std::uint32_t resolve(Communicator& comm);

 private:
  template <class Index>
  void grouped(Communicator& comm, HashPartition<Index>& part, std::vector<Entry<Index>>& received,
               std::vector<std::size_t>& recv_counts);
  template <class Index>
  struct Buffers {
    std::vector<std::size_t> sub_counts, recv_sub;
    std::vector<Entry<Index>> send, gathered, merged, tmp;
  };
  template <class Index>
  Buffers<Index>& buffers() {
    if constexpr (std::is_same_v<Index, std::uint32_t>)
      return buffers32_;
    else
      return buffers64_;
  }

  std::uint32_t requested_;
  std::size_t merge_op_;
  std::uint32_t group_ = 0;                    // resolved on the first call
  std::optional<Communicator> node_, column_;  // the group, and the ranks of this local index
  Buffers<std::uint32_t> buffers32_;           // reused between calls
  Buffers<std::uint64_t> buffers64_;
};

}  // namespace atl::sync
