// Zen's exchanges (zen.cpp), flat or in groups of ranks: the push of every rank's hash partition
// to the servers that own it, and the pull of every server's blocks to every rank.
//
// Flat (group 1): the push is one alltoall of counts and one alltoallv of entries, each chunk of
// the pull one allgatherv; n - 1 messages per rank each way, and every rank receives every block
// over its own link.
//
// Grouped (group G > 1 dividing n; ranks g·G .. g·G + G - 1 form group g, and rank g·G + l has
// local index l; a node's ranks when G is the ranks per node): each exchange in two steps, one
// between the groups over the communicator of the ranks of one local index (the "column"), one
// within the group.
//  push: 1. within the group, the rank of local index l collects from its G - 1 peers their
//        blocks for the servers of local index l (servers l, G + l, 2G + l, ...) and sums them per
//        server (a merge of the G sorted blocks: a non-zero the group shares crosses the next step
//        once); 2. over the column, rank (g, l) sends server (g', l) that sum.
//  pull (per chunk): 1. over the column, rank (g, l) receives the blocks of the servers of local
//        index l; 2. within the group, each rank gives its G - 1 peers those: every rank holds
//        every block, and each group received each block once from outside (not G times).
// Messages per rank (G - 1) + (n/G - 1) instead of n - 1 per exchange; the bytes that leave or
// enter a group shrink by the group's overlap in the push and G-fold in the pull. The result is
// the same sum as the flat exchanges' (float additions in another order).
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

class ZenGroups {
 public:
  // group: ranks per group (1: flat; 0: the ranks per node on several nodes of as many
  // consecutive ranks, flat otherwise: SchemeOptions::zen_group). merge_op: the cpu cost operation
  // charged for the grouped push's reorder and merge (cpu_costs.h). group_push: false keeps the
  // push flat when grouped (the pull alone in two steps).
  ZenGroups(std::uint32_t group, bool group_push, std::size_t merge_op);

  // Sends `part` (layout.servers() == comm.size()) and fills `received` with what this server
  // gets, `recv_counts[r]` entries from rank r (zero for the ranks that sent nothing; the grouped
  // push's blocks come from one rank per group). Every received index is this server's, checked
  // by the caller. The grouped exchanges add their traffic between groups to comm's counters.
  // A group that does not divide n: std::invalid_argument on every rank, before any message.
  // (The push without counts: zen_push_verdict.h.)
  template <class Index>
  void push(Communicator& comm, HashPartition<Index>& part, std::vector<Entry<Index>>& received,
            std::vector<std::size_t>& recv_counts);

  // The group size used on `comm` (1 when flat); collective on the first call.
  std::uint32_t resolve(Communicator& comm);
  // Whether the exchanges may be flat (before the first call: unless a group above 1 is asked).
  bool maybe_flat() const { return group_ ? group_ == 1 : requested_ <= 1; }

  // One chunk of the pull in flight: post_pull sends this server's block (`mine`, counts[rank]
  // bytes; counts[j] bytes from server j) and wait_pull leaves every server's block in `recv`, in
  // the order pull_order() gives. Every rank posts and waits the same chunks in the same order.
  // `mine`, `counts` and `recv` must stay valid until wait_pull.
  struct PullChunk {
    comm::Request request;
    std::vector<std::uint8_t> staged;      // grouped: the column's blocks
    std::vector<std::size_t> step_counts;  // grouped: bytes per column rank, then per group rank
    std::span<std::uint8_t> recv;
  };
  void post_pull(Communicator& comm, std::span<const std::uint8_t> mine,
                 std::span<const std::size_t> counts, std::span<std::uint8_t> recv,
                 PullChunk& chunk);
  void wait_pull(Communicator& comm, PullChunk& chunk);
  // Lets the library move the chunk while this rank computes (Communicator::progress).
  void progress_pull(Communicator& comm, PullChunk& chunk);
  // The server of each block in a waited chunk's `recv` (empty: 0, 1, ..., n - 1).
  std::span<const std::uint32_t> pull_order() const { return order_; }

 private:
  template <class Index>
  void grouped_push(Communicator& comm, HashPartition<Index>& part,
                    std::vector<Entry<Index>>& received, std::vector<std::size_t>& recv_counts);
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

  // Adds the traffic between groups (column_'s) since the last call to comm's counters; the bytes
  // within a group are not counted (a node's shared memory, not its network).
  void report_traffic(Communicator& comm);

  std::uint32_t requested_;
  bool group_push_;
  std::size_t merge_op_;
  std::uint32_t group_ = 0;                    // resolved on the first call
  std::optional<Communicator> node_, column_;  // the group, and the ranks of this local index
  std::vector<std::uint32_t> order_;           // pull_order()
  comm::TrafficCounters reported_;             // column_'s at the last report
  Buffers<std::uint32_t> buffers32_;           // reused between calls
  Buffers<std::uint64_t> buffers64_;
};

}  // namespace atl::sync
