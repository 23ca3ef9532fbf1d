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
// parameters' through non-blocking allreduce per unit (model.h: the embedding, the input, each
// block, the output). Inner optimizer states stay per worker across syncs.
//
// EDiT's layer-wise synchronization (--strategy edit, overlap on): at a sync point only the local
// part runs (Δ, the penalty's one allgather of norms); the units' averages and outer steps then
// complete inside the next step's forward pass, unit u just before its compute, with the
// allreduce of the next --sync-prefetch units in flight meanwhile (before_unit, called from the
// model's LayerHooks; --sync-prefetch 0, the default, posts every unit's allreduce when the forward
// pass begins). Without overlap (diloco, edit --no-overlap) the same operations complete at the
// sync point: every unit's allreduce posted, the embedding's sparse sync, the units completed in
// order. Both orders compute the same numbers. Private to src/train.
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
#include "faults.h"
#include "flat_params.h"
#include "local_sgd_shards.h"
#include "settings.h"
#include "timed_rounds.h"

namespace atl::train {

template <class Index>
class LocalSgd {
 public:
  // `workers`: the workers synchronizing (the communicator passed to every call below is theirs:
  // the world, or the mesh's sync group). `group`: the worker's shard group under the 2-D mesh
  // (aedit's rounds are agreed on in it; with config.shard the state is split over it), else null.
  LocalSgd(const TrainConfig& config, Engine& engine, int workers, comm::Communicator* group);

  // True when `step` trains locally (no per-step gradient synchronization).
  bool is_local(int step) const { return step > sync_warmup_steps_; }
  // Before a local step's forward pass: θ̄ is taken from the (still identical) replicas the first
  // time, i.e. when local training begins or after a resume from the warm-up phase.
  void begin_step(comm::Communicator& comm, int step);
  // After a local step's inner optimizer step: notes the embedding rows this worker changed;
  // every H-th local step (aedit: at a round, timed_rounds.h) the outer synchronization
  // (collective; with overlap only begun). Returns true when it synced.
  bool end_step(comm::Communicator& comm, int step, const RowGradient& local_rows);
  // Before unit u's forward compute: with a synchronization pending, posts the allreduce of the
  // units up to u + prefetch (all with prefetch 0) and completes unit u (its parameters become θ̄).
  // Collective in the sense that all ranks call it for the same units in the same order.
  void before_unit(comm::Communicator& comm, int unit);
  // aedit: the round this step joined (synced or skipped), if any.
  const std::optional<TimedRounds::Round>& last_round() const { return round_; }
  const TimedRounds* rounds() const { return timed_ ? &*timed_ : nullptr; }
  // aedit: validation and checkpoints do not count as training time.
  void pause_clock(comm::Communicator& comm);
  void resume_clock(comm::Communicator& comm);
  // Lets posted transfers move (Open MPI progresses them only inside MPI calls).
  void progress(comm::Communicator& comm);
  // Completes a pending synchronization (before validation, a checkpoint, the end of the run).
  void flush(comm::Communicator& comm);
  bool pending() const { return pending_; }

  // Runs `f` with the model's parameters set to θ̄ (validation evaluates the synchronized
  // parameters, not this worker's diverged replica), then restores them. Flushes first.
  void with_outer_params(comm::Communicator& comm, const std::function<void()>& f);

  // Sync events for --timeline: per unit, when its allreduce was posted, when this rank began to
  // wait for it and when it completed (on the engine's clock). Set a recorder to receive them.
  using SyncEventSink = std::function<void(int unit, double posted, double wait_begin, double end)>;
  void on_sync_event(SyncEventSink sink) { sync_event_ = std::move(sink); }

  // Bytes this rank sent in the last synchronization (embedding + dense), and its phase times.
  const sync::SyncStats& last_embedding_stats() const { return emb_result_.stats; }
  std::uint64_t last_bytes_sent() const { return last_bytes_sent_; }
  // edit: the last synchronization's penalty outcome, (layer, worker) pairs dropped and layers
  // whose outer step was skipped (every worker an outlier); whether the injected fault fired.
  const std::vector<std::pair<int, int>>& last_dropped() const { return last_dropped_; }
  const std::vector<int>& last_skipped_layers() const { return last_skipped_; }
  bool fault_fired() const { return fault_fired_; }
  // edit: the last synchronization's weights, averaged over layers: the largest weight and the
  // effective number of workers 1/Σw² (n for equal weights, 1 when one worker has them all).
  struct WeightStats {
    double max = 0.0, effective_workers = 0.0;
  };
  const WeightStats& last_weights() const { return last_weights_; }
  // Layers the penalty works on: the model's units (model.h).
  int penalty_layers() const { return layers_; }
  // The 2-D mesh: this rank keeps 1/S of the state; the bytes it holds (θ̄, outer momentum, Δ).
  bool sharded() const { return shards_.sharded(); }
  std::size_t state_bytes() const;

  // Checkpoint state shared by all workers (θ̄, outer momentum; rank 0 writes it) and this
  // worker's own (the embedding rows touched since the last sync).
  void save_shared(torch::serialize::OutputArchive& ar) const;
  void load_shared(torch::serialize::InputArchive& ar);
  void save_local(torch::serialize::OutputArchive& ar, double now) const;
  void load_local(torch::serialize::InputArchive& ar);
  // An elastic resume's new worker: its model set to θ̄, nothing touched since (after load_*).
  void restart_from_outer();

 private:
  // The local part of a synchronization: Δ, the fault, the weights; then pending.
  void begin_sync(comm::Communicator& comm, int step);
  void average_finite(comm::Communicator& comm);          // diloco's weights (begin_sync)
  void post_through(comm::Communicator& comm, int unit);  // posts units next_post_ .. unit
  void finish_unit(comm::Communicator& comm, int unit);   // waits, outer step, θ̄ into the model
  void finish_embedding(comm::Communicator& comm);
  void note_touched_weights();  // --embedding-mean touched (begin_sync)
  void mean_over_touching(comm::Communicator& comm, RowGradient& rows);  // (finish_embedding)
  bool clipping() const;
  double clip_scale_of(double norm) const;
  double clip_scale(int unit);  // collective over the shard group when sharded and clipping
  sparse::SparseGradient<Index> embedding_pseudo_gradient();
  // edit: per-layer weights of this worker from one allgather of every worker's layer norms (the
  // same decisions on every rank); applies them to Δ (dense and embedding values) in place.
  void penalize(comm::Communicator& comm, sparse::SparseGradient<Index>& embedding);
  void note_weights(const std::vector<double>& weights);
  void weigh_by_steps(std::vector<double>& weights) const;
  void outer_step_dense(std::size_t begin, std::size_t end, double scale);
  void outer_step_embedding(const RowGradient& rows, double scale);
  // θ̄ of unit u (of the embedding) into this worker's model: unsharded, the whole unit; sharded,
  // this rank's piece (block of rows), gathered before the unit's next use.
  void unit_to_model(int unit);
  void read_unit(int unit, std::span<float> out);
  void embedding_to_model();
  // ||x||² of the unit's piece of `buffer`, summed over the shard group (collective when sharded).
  double unit_squares(const std::vector<float>& buffer, int unit);

  Engine& engine_;
  std::unique_ptr<sync::SyncScheme> scheme_;
  FlatParams dense_;
  int sync_every_, sync_warmup_steps_;
  double outer_lr_, outer_momentum_;
  bool started_ = false;
  std::vector<float> outer_dense_, momentum_dense_, delta_dense_;  // θ̄, b, Δ over the dense params
  torch::Tensor outer_embedding_, momentum_embedding_;             // θ̄, b over the embedding
  // θ̄ and b: this rank's pieces (all of it unsharded); the embedding's: its block of rows.
  std::vector<std::uint8_t> touched_;  // per embedding row (all rows), this worker
  sync::SyncResult<Index> emb_result_;
  std::uint64_t last_bytes_sent_ = 0;
  int layers_ = 0;
  comm::Communicator* group_ = nullptr;  // the 2-D mesh's shard group
  // Each unit's range of the flat dense buffer (unit 0, the embedding, has none), and this rank's
  // piece of it under the 2-D mesh.
  StateShards shards_;
  bool overlap_ = false;
  int prefetch_ = 0;
  // The synchronization in progress: the embedding's Δ, each unit's request, the next unit to
  // post and to complete, the traffic counter when it began.
  bool pending_ = false;
  sparse::SparseGradient<Index> local_;
  std::vector<comm::Request> requests_;
  std::vector<double> posted_at_;
  int next_post_ = 1, next_finish_ = 0;
  std::uint64_t bytes_at_begin_ = 0;
  SyncEventSink sync_event_;
  std::optional<localsgd::PseudoGradientPenalty> penalty_;
  std::vector<std::pair<int, int>> last_dropped_;
  std::vector<int> last_skipped_;
  WeightStats last_weights_;
  double step_weight_ = 0;
  bool embedding_rows_ = true;  // the embedding's Δ as rows (TrainConfig::embedding_rows)
  // --embedding-mean touched: per row of this rank's block, the weights of the workers that
  // touched it (this worker's, summed in finish_embedding); empty: the mean over all workers.
  bool touched_mean_ = false;
  float embedding_weight_ = 0;
  std::vector<float> touched_weights_;
  std::optional<TimedRounds> timed_;
  std::optional<TimedRounds::Round> round_;
  std::optional<FaultInjection> fault_;
  bool fault_fired_ = false;
};

}  // namespace atl::train
