// DiLoCo (Douillard et al., arXiv 2311.08105): local SGD with an outer optimizer.
//
// After --sync-warmup-steps data-parallel steps, each worker takes H = --sync-every inner steps on
// its own data without synchronizing, then: Δ_i = θ̄ − θ_i (pseudo-gradient), Δ̄ = mean_i Δ_i,
// an outer SGD step with Nesterov momentum on θ̄ (torch's rule: b ← μ·b + Δ̄; θ̄ ← θ̄ − lr·(Δ̄ + μ·b);
// μ = 0 gives θ̄ ← θ̄ − lr·Δ̄), and every worker restarts from θ̄. With H = 1, lr 1, μ 0 and plain
// SGD inside, θ̄ ← mean_i θ_i = θ̄ − lr_inner · mean_i g_i: exactly synchronous SGD.
//
// The embedding's pseudo-gradient is sparse: only rows a worker touched in its H steps moved, so
// it goes through the sparse scheme (--sync) as element-level COO over vocab × E; the dense
// parameters' through bucketed allreduce. Inner optimizer states stay per worker across syncs.
// Private to src/train.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/localsgd/penalty.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/trainer.h"
#include "embedding_rows.h"
#include "engine.h"
#include "flat_params.h"
#include "settings.h"

namespace atl::train {

template <class Index>
class LocalSgd {
 public:
  LocalSgd(const TrainConfig& config, Engine& engine, int world);

  // True when `step` trains locally (no per-step gradient synchronization).
  bool is_local(int step) const { return step > sync_warmup_steps_; }
  // Before a local step's forward pass: θ̄ is taken from the (still identical) replicas the first
  // time, i.e. when local training begins or after a resume from the warm-up phase.
  void begin_step(int step);
  // After a local step's inner optimizer step: notes the embedding rows this worker changed;
  // every H-th local step the outer synchronization (collective). Returns true when it synced.
  bool end_step(comm::Communicator& comm, int step, const RowGradient& local_rows);

  // Runs `f` with the model's parameters set to θ̄ (validation evaluates the synchronized
  // parameters, not this worker's diverged replica), then restores them.
  void with_outer_params(const std::function<void()>& f);

  // Bytes this rank sent in the last synchronization (embedding + dense), and its phase times.
  const sync::SyncStats& last_embedding_stats() const { return emb_result_.stats; }
  std::uint64_t last_bytes_sent() const { return last_bytes_sent_; }
  // edit: the last synchronization's penalty outcome, (layer, worker) pairs dropped and layers
  // whose outer step was skipped (every worker an outlier); whether the injected fault fired.
  const std::vector<std::pair<int, int>>& last_dropped() const { return last_dropped_; }
  const std::vector<int>& last_skipped_layers() const { return last_skipped_; }
  bool fault_fired() const { return fault_fired_; }
  // Layers the penalty works on: 0 = the embedding, 1..L = transformer blocks, L+1 = the rest.
  int penalty_layers() const { return layers_; }

  // Checkpoint state shared by all workers (θ̄, outer momentum; rank 0 writes it) and this
  // worker's own (the embedding rows touched since the last sync).
  void save_shared(torch::serialize::OutputArchive& ar) const;
  void load_shared(torch::serialize::InputArchive& ar);
  void save_local(torch::serialize::OutputArchive& ar) const;
  void load_local(torch::serialize::InputArchive& ar);

 private:
  void outer_sync(comm::Communicator& comm, int step);
  sparse::SparseGradient<Index> embedding_pseudo_gradient() const;
  // edit: per-layer weights of this worker from one allgather of every worker's layer norms (the
  // same decisions on every rank); applies them to Δ (dense and embedding values) in place.
  std::vector<double> penalize(comm::Communicator& comm, sparse::SparseGradient<Index>& embedding);
  void outer_step_dense(const std::vector<double>& layer_scale);
  void outer_step_embedding(const RowGradient& rows, double scale);

  Engine& engine_;
  std::unique_ptr<sync::SyncScheme> scheme_;
  FlatParams dense_;
  int sync_every_, sync_warmup_steps_;
  double outer_lr_, outer_momentum_;
  bool started_ = false;
  std::vector<float> outer_dense_, momentum_dense_, delta_dense_;  // θ̄, b, Δ over the dense params
  torch::Tensor outer_embedding_, momentum_embedding_;             // θ̄, b over the embedding
  std::vector<std::uint8_t> touched_;                              // per embedding row, this worker
  sync::SyncResult<Index> emb_result_;
  std::uint64_t last_bytes_sent_ = 0;
  // Dense parameters' element ranges and their penalty layer.
  struct Range {
    std::size_t begin, end;
    int layer;
  };
  std::vector<Range> ranges_;
  int layers_ = 0;
  std::optional<localsgd::PseudoGradientPenalty> penalty_;
  std::vector<std::pair<int, int>> last_dropped_;
  std::vector<int> last_skipped_;
  std::optional<FaultInjection> fault_;
  bool fault_fired_ = false;
};

}  // namespace atl::train
