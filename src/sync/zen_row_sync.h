// Zen's synchronization of a gradient of rows (SparseGradient::width > 1): partition, push,
// aggregate and pull over rows (include/atoll/sync/zen_rows.h), the path src/sync/zen.cpp takes
// for such gradients. Private to src/sync.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_rows.h"

namespace atl::sync {

class ZenRowSync {
 public:
  // `views` (SchemeOptions::row_views): results in views, the rows' values left in the pulled
  // blocks.
  ZenRowSync(std::uint64_t seed, PullCoding coding, bool views = false);
  // One synchronization (collective); `out.sparse` gets grad's width. Phases: partition, push,
  // aggregate, encode, pull, decode (as for elements: the pull pipelined in chunks).
  // `input_problem` given (SchemeOptions::zen_check_in_push): the input was not checked across
  // ranks yet; this rank's problem (local_input_problem) rides in the push's alltoall of counts
  // with its M and width, and the verdicts are settled there (settle_input), before any data
  // moves. A rank with a problem partitions nothing.
  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out,
           const std::optional<std::string>* input_problem = nullptr);

  // The pull's chunks with or without views (SchemeOptions::row_views), each one exchange after
  // the pull's counts.
  static std::size_t pull_chunks(bool views) { return views ? 1 : kChunks; }

 private:
  static constexpr std::size_t kBuckets = 256;  // of strata, for balancing the pull's chunks
  // At most: each chunk adds a collective's latency and handshakes (communication alone on the
  // real 16-worker traces, cluster-16x25g: 2.03 ms in 1 chunk, 2.30 in 3, 2.61 in 8) and hides
  // decode work behind the next one (with computation: 3.68 / 3.30-3.31 / 3.39-3.47 ms).
  static constexpr std::size_t kChunks = 3;
  // With views the decode copies nothing (it walks the keys), so there is nothing to hide: one
  // chunk, one collective.
  std::size_t chunks() const { return pull_chunks(views_); }
  using Encode = std::function<std::size_t(std::size_t s0, std::size_t s1)>;
  using Size = std::function<void(std::size_t rows)>;
  using Decode = std::function<std::size_t(
      std::size_t s0, std::size_t s1, std::span<const std::uint8_t> blocks,
      std::span<const std::size_t> counts, std::span<const std::uint64_t> rows,
      std::span<const PullCoding> codings, std::size_t pos, std::size_t capacity)>;
  // The pull of this server's sums (sums_), independent of the index type: chunk bounds, block
  // sizes, the pipelined exchange; `size_result` sizes the result for all the rows, then each
  // chunk is decoded at row `pos` of it.
  void pull(Communicator& comm, std::uint32_t width, std::size_t index_bytes, SyncStats& stats,
            const Encode& encode_chunk, const Size& size_result, const Decode& decode_chunk);

  std::uint64_t seed_;
  PullCoding coding_;
  std::size_t op_partition_, op_aggregate_, op_encode_, op_decode_;  // cpu_costs.h
  RowLayout layout_;
  RowPartition<std::uint32_t> part32_;
  RowPartition<std::uint64_t> part64_;
  bool views_;
  std::vector<std::uint8_t> received_, block_;
  // Every server's pulled blocks, laid end to end: float storage seen as bytes, so that the
  // results' views (whole floats at 4-byte aligned offsets, zen_row_encode) point at floats.
  std::vector<float> all_;
  std::span<std::uint8_t> all_bytes(std::size_t bytes);  // all_ resized to hold `bytes`
  ZenRowSums sums_;
};

}  // namespace atl::sync
