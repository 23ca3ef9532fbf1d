// Zen's synchronization of a gradient of rows (SparseGradient::width > 1): partition, push,
// aggregate and pull over rows (include/atoll/sync/zen_rows.h), the path src/sync/zen.cpp takes
// for such gradients. Private to src/sync.
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_rows.h"

namespace atl::sync {

class ZenRowSync {
 public:
  ZenRowSync(std::uint64_t seed, PullCoding coding);
  // One synchronization (collective); `out.sparse` gets grad's width. Phases: partition, push,
  // aggregate, encode, pull, decode (as for elements; the pull is one exchange, not chunked).
  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out);

 private:
  std::uint64_t seed_;
  PullCoding coding_;
  std::size_t op_partition_, op_aggregate_, op_encode_, op_decode_;  // cpu_costs.h
  RowLayout layout_;
  RowPartition<std::uint32_t> part32_;
  RowPartition<std::uint64_t> part64_;
  std::vector<std::uint8_t> received_, block_, all_;
  ZenRowSums sums_;
};

}  // namespace atl::sync
