// Zen's pull (step 4 of src/sync/zen.cpp): every server sends its slot sums to every rank, each in
// the coding its server chose, and every rank decodes them into one gradient sorted by index.
// Two transports: pipelined in byte-balanced chunks of the index space after one exchange of
// counts, or one exchange without counts where every block's bound is small (a latency-bound
// network, or a small M: zen_exchanges_without_counts).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"
#include "zen_groups.h"

namespace atl::sync {

// What both transports read: the layout, this server's coding, and how its CPU work is split and
// charged (cpu_costs.h operation ids).
struct ZenPullSetup {
  const HashLayout& layout;
  PullCoding coding;
  unsigned threads;
  ParallelTasks parallel;
  std::size_t op_plan, op_encode, op_decode;
  // SchemeOptions::fold_in_place: each chunk's blocks are folded where they arrived (zen_fold.h)
  // instead of decoded; the result is SyncResult::folded, its phase "consume".
  bool fold_in_place = false;
};

// Buffers reused between calls: this server's blocks, and every server's as received.
struct ZenPullBuffers {
  std::vector<std::uint8_t> block;
  std::vector<std::uint8_t> all;
};

// Pipelined: one small allgather of every server's per-bucket counts (`sums.bucket_nnz` over
// `buckets`) gives every rank the same chunk bounds (at most max_chunks, blocks of min_block bytes
// on average: zen_pull_chunk_count) and every block's size; then each server encodes chunk p+1 and
// puts it on the wire while every rank decodes chunk p into its place in `out`.
template <class Index>
void zen_pull_chunked(Communicator& comm, const ZenPullSetup& setup, ZenGroups& groups,
                      const ZenServerSums<Index>& sums, std::span<const std::uint64_t> buckets,
                      std::uint32_t max_chunks, std::uint64_t min_block, ZenPullBuffers& buf,
                      SyncResult<Index>& out);

// One exchange: server j's block is at most bounds[j] bytes; the received sizes tell the rest.
template <class Index>
void zen_pull_one_exchange(Communicator& comm, const ZenPullSetup& setup,
                           std::span<const std::size_t> bounds, const ZenServerSums<Index>& sums,
                           ZenPullBuffers& buf, SyncResult<Index>& out);

// A pipelined pull's phases as in an unpipelined data path: "encode" and "decode" are this rank's
// CPU work, "pull" the rest since `start` (waiting for the network), with the bytes moved since
// `traffic_start`. Shared by the element and the row path (zen_row_sync.cpp).
void record_pull_phases(Communicator& comm, SyncStats& stats, double start,
                        const comm::TrafficCounters& traffic_start, double encode_s,
                        double decode_s, const char* decode_name = "decode");

}  // namespace atl::sync
