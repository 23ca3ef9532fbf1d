// Synchronous data-parallel training (--strategy ddp): every step the embedding's sparse gradient
// is summed over all ranks by the sparse scheme (--sync), the dense gradients by bucketed
// allreduce (or top-k with error feedback), and every rank takes the same optimizer step. Also
// the warm-up steps of local SGD (--sync-warmup-steps) and the benchmark mode
// --compare-schemes. Private to src/train.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/trainer.h"
#include "embedding_rows.h"
#include "engine.h"
#include "nonfinite.h"
#include "scheme_comparison.h"
#include "step_timer.h"
#include "timeline.h"

namespace atl::train {

template <class Index>
class DataParallel {
 public:
  // Prepares the schemes (auto's probe runs here, outside every timed step). Collective.
  // `reduce_scatter`: the 2-D mesh with sharded parameters: the dense gradients are
  // reduce-scattered in the shard group to the ranks' pieces (the engine's sharded optimizer
  // steps them) instead of averaged whole; with `across` (ddp over all ranks: the mesh's sync
  // group), the pieces' sums are then allreduced across the groups.
  // `world_rank`: this rank's name in messages (comm may be a shard group).
  DataParallel(comm::Communicator& comm, const TrainConfig& config, Engine& engine, int world_rank,
               bool reduce_scatter = false, comm::Communicator* across = nullptr);

  // Whether the dense gradients' sums overlap the backward pass (--backward-overlap; not with
  // --topk or sharded parameters): the caller then calls post_unit as each unit's backward
  // ends (the trainer's LayerEvents does), and synchronize() waits for them.
  bool overlaps_backward() const { return dense_mode_ == DenseMode::overlapped; }
  // Collective: posts unit `unit`'s dense gradient sum (every rank, the same units in the same
  // order, on the communicator later passed to synchronize).
  void post_unit(comm::Communicator& comm, int unit) { engine_.dense_sync->post_unit(comm, unit); }
  // --timeline: the overlapped dense sums' sync events (posted, wait, done) per unit.
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

  // One step's synchronization after the backward pass (collective), timed as the phases "wait",
  // "compare", "embedding_sync", "rows", "dense_sync": the embedding gradient `local` summed and
  // averaged into rows, the dense gradients averaged in place (with the overlap: the sums posted
  // during the backward pass waited for, the units not posted yet posted first). Returns the
  // rows; `mean_loss` receives the mean of the ranks' `loss`. The ranks first agree whether any
  // gradient holds a NaN or an infinity (nonfinite.h; the allreduce is the step's barrier): if so
  // nothing more is synchronized (dense sums already posted complete and are discarded), no rank
  // may take the optimizer step, and nonfinite() names the rank and tensor.
  RowGradient synchronize(comm::Communicator& comm, StepTimer& timer, int step,
                          const sparse::SparseGradient<Index>& local, double loss,
                          double& mean_loss);

  const sync::SyncResult<Index>& embedding_result() const { return result_; }
  // The last synchronize's non-finite gradient (nullopt: all were finite, the step may be taken).
  const std::optional<NonFinite>& nonfinite() const { return nonfinite_; }
  SchemeComparison<Index>& comparison() { return comparison_; }

 private:
  // How the dense gradients are summed: reduce-scattered (the mesh's sharded parameters),
  // overlapped with the backward pass, posted before the embedding's sync and waited for after it
  // (the default), or summed after it (top-k; compared schemes, whose timings sums in flight
  // would disturb).
  enum class DenseMode { sharded, overlapped, posted, after };
  static DenseMode dense_mode(const TrainConfig& config, const Engine& engine, bool reduce_scatter);
  // This rank's first_nonfinite (nonfinite.h) of the step's gradients; in modes posted and after
  // it also gathers the dense gradients for synchronize's sums (the check is that copy).
  int check_gradients(std::span<const float> embedding_values);

  Engine& engine_;
  int world_rank_;
  comm::Communicator* across_;
  DenseMode dense_mode_;
  Timeline* timeline_ = nullptr;
  std::int64_t E_;
  std::unique_ptr<sync::SyncScheme> scheme_, dense_scheme_;  // the top-k path has its own buffers
  SchemeComparison<Index> comparison_;
  sync::SyncResult<Index> result_;
  std::optional<NonFinite> nonfinite_;
};

}  // namespace atl::train
