// Synchronous data-parallel training (--strategy ddp): every step the embedding's sparse gradient
// is summed over all ranks by the sparse scheme (--sync), the dense gradients by bucketed
// allreduce (or top-k with error feedback), and every rank takes the same optimizer step. Also
// the warm-up steps of local SGD (--sync-warmup-steps) and the benchmark mode
// --compare-schemes. Private to src/train.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/trainer.h"
#include "embedding_rows.h"
#include "engine.h"
#include "scheme_comparison.h"
#include "step_timer.h"

namespace atl::train {

template <class Index>
class DataParallel {
 public:
  // Prepares the schemes (auto's probe runs here, outside every timed step). Collective.
  // `reduce_scatter`: the 2-D mesh with sharded parameters: the dense gradients are
  // reduce-scattered in the shard group to the ranks' pieces (the engine's sharded optimizer
  // steps them) instead of averaged whole; with `across` (ddp over all ranks: the mesh's sync
  // group), the pieces' sums are then allreduced across the groups.
  DataParallel(comm::Communicator& comm, const TrainConfig& config, Engine& engine,
               bool reduce_scatter = false, comm::Communicator* across = nullptr);

  // One step's synchronization after the backward pass (collective), timed as the phases "wait",
  // "compare", "embedding_sync", "rows", "dense_sync": the embedding gradient `local` summed and
  // averaged into rows, the dense gradients averaged in place. Returns the rows; `mean_loss`
  // receives the mean of the ranks' `loss`.
  RowGradient synchronize(comm::Communicator& comm, StepTimer& timer, int step,
                          const sparse::SparseGradient<Index>& local, double loss,
                          double& mean_loss);

  const sync::SyncResult<Index>& embedding_result() const { return result_; }
  SchemeComparison<Index>& comparison() { return comparison_; }

 private:
  Engine& engine_;
  bool reduce_scatter_;
  comm::Communicator* across_;
  std::int64_t E_;
  std::unique_ptr<sync::SyncScheme> scheme_, dense_scheme_;  // the top-k path has its own buffers
  SchemeComparison<Index> comparison_;
  sync::SyncResult<Index> result_;
};

}  // namespace atl::train
