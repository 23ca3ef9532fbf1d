// EDiT's 2-D mesh (--shard-group-size S): worker k is the shard group of ranks [kS, (k+1)S); the
// ranks with the same index in every group form a sync group. Inside a group gradients are
// averaged every step (data-parallel); local SGD synchronizes across the workers over the sync
// group, each rank for its 1/S share of the local-SGD state when sharded. The data shards stay
// per rank (documents dealt round-robin over all ranks, batches keyed by the global rank
// k·S + g), so worker k's data is the union of its ranks' shards and the batch of a worker is S
// per-rank batches. Private to src/train.
#pragma once

#include <optional>

#include "atoll/comm/communicator.h"

namespace atl::train {

class Mesh {
 public:
  // Splits `world` into shard groups and sync groups when S > 1 (collective); S must divide the
  // world size (checked by the caller).
  Mesh(comm::Communicator& world, int group_size);

  int group_size() const { return group_size_; }
  int workers() const { return workers_; }
  int worker() const { return worker_; }
  // This worker's shard group (none when S = 1).
  comm::Communicator* group() { return group_ ? &*group_ : nullptr; }
  // The communicator local SGD synchronizes over: the sync group, or the world when S = 1.
  comm::Communicator& sync() { return sync_ ? *sync_ : world_; }

 private:
  comm::Communicator& world_;
  int group_size_, workers_, worker_;
  std::optional<comm::Communicator> group_, sync_;
};

}  // namespace atl::train
