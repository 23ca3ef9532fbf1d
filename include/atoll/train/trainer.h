// `atoll train`: a GPT-style language model trained data-parallel on the Brown corpus with
// LibTorch, the embedding gradient synchronized by a sparse scheme (Zen by default).
//
// This header is free of LibTorch so that the front end compiles quickly; the engine lives in
// src/train/ (model.cpp, trainer.cpp, checkpoint.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::train {

struct ModelShape {
  int vocab = 16384;  // rows of the token embedding (= the vocabulary size)
  int d_embed = 64;   // embedding width; projected to d_model when it differs
  int d_model = 64;
  int layers = 2;
  int heads = 4;
  int seq_len = 32;
  std::string head = "full";  // full softmax | adaptive (Grave et al.: shortlist + tail clusters)
  std::vector<std::int64_t> cutoffs;  // adaptive head cluster boundaries (ids), ascending
};

struct TrainConfig {
  std::string preset = "tiny";  // tiny | small: fills the model shape and batch (flags override)
  ModelShape model;
  std::string corpus;  // empty: the cache scripts/fetch-corpus fills
  int batch = 16;      // sequences per rank per step
  int steps = 300;  // aedit: the run ends at the first sync where all workers' steps >= steps·world
  std::uint64_t seed = 1;
  // Training strategy: ddp (synchronous data-parallel: gradients summed every step), diloco
  // (local SGD: --sync-every H inner steps per worker, then pseudo-gradients averaged and an
  // outer Nesterov-SGD step on the synchronized parameters; docs/train.md), edit (diloco plus
  // the pseudo-gradient penalty per layer, layer-wise overlapped sync) or aedit (edit with
  // time-based rounds instead of H: a worker takes as many local steps as fit in the period).
  std::string strategy = "ddp";
  int sync_every = 50;              // diloco: H, inner steps between synchronizations
  int sync_warmup_steps = 0;        // diloco: data-parallel steps before local steps begin
  double outer_lr = 0.7;            // diloco: outer SGD learning rate
  double outer_momentum = 0.9;      // diloco: outer Nesterov momentum (0 = plain SGD)
  std::string optimizer = "adamw";  // inner optimizer: adamw | sgd (no momentum, no decay)
  // aedit: a round every sync_seconds of training time (from the end of the previous round); a
  // round with fewer than min_round_steps local steps (all workers together) since the last sync
  // is skipped; step_weight r mixes each worker's share of those steps into its weight.
  double sync_seconds = 0;
  int min_round_steps = 1;
  double step_weight = 0;
  // edit: the pseudo-gradient penalty per layer (EDiT, ICLR'25; include/atoll/localsgd/penalty.h):
  // EWMA anomaly elimination, softmax(−norm/T) weights, clipping of the average.
  bool penalty = true;             // --no-penalty: plain averaging
  double anomaly_threshold = 3.0;  // z-score threshold
  double ewma_alpha = 0.02;
  int ewma_warmup = 120;  // synchronizations before detection starts
  double weight_temperature = 1.0;
  double clip = 0.0;  // τ on ||Δ̄|| per layer; 0 = off
  // edit: layer-wise synchronization overlapped with the next step's forward pass (--no-overlap:
  // completed at the sync point, as diloco), with this many units' allreduce in flight ahead of
  // the unit computing (0: all of them, posted when the forward pass begins).
  bool overlap = true;
  int sync_prefetch = 0;
  // Synchronous steps (ddp, local SGD's warm-up): --backward-overlap sums each unit's dense
  // gradients (non-blocking) as soon as its backward ends, as PyTorch's DDP does; the default is
  // one bucketed allreduce after the backward pass (docs/results/train.md 3c: the overlap measured
  // 7% slower at 16 simulated ranks, 25 Gbit/s). Not with --topk or sharded parameters.
  bool backward_overlap = false;
  // The 2-D mesh (EDiT): a worker is shard_group_size consecutive ranks (ranks [kS, (k+1)S) are
  // worker k) that average their gradients every step, as data-parallel training does; local SGD
  // synchronizes across workers, each rank with the ranks of the same index in the other groups.
  // shard (the default; --no-shard: replicated, the reference): the local-SGD state (θ̄, outer
  // momentum, pseudo-gradient) and its synchronization are split 1/S over the group's ranks.
  int shard_group_size = 1;
  bool shard = true;
  // Training across sites (docs/wan-train.md): with a topology (the planner's CSV), each rank is
  // one site; local SGD meets in the cliques of the schedule's rounds (planned: the planner's
  // schedule for the model's real payload; all-to-all; or a schedule file) instead of globally,
  // and every step advances a model clock (compute_s per local step / the site's speed, the
  // round model's time per round, the alpha-beta cost of ddp's per-step collectives).
  std::string topology;                      // empty: no sites (ordinary training)
  std::string schedule = "planned";          // planned | all-to-all | FILE
  double fpga_memory = 0;                    // bytes per site; 0: the topology file's
  double egress_gbps = 0, ingress_gbps = 0;  // per site; 0: the topology file's
  std::string transport = "best";            // unicast | multicast_fpga | best
  double compute_s = 0;                      // model seconds per local step; 0: the measured time
  std::string site_speed;                    // "CODE:FACTOR,...": compute_s / FACTOR at that site
  int overlap_rounds = 0;  // 1: a meeting's exchange overlaps the next H local steps (diloco)
  // When an overlapped exchange's result is applied: "meeting" (at the next meeting, one round
  // stale) or "arrival" (after the first local step that ends past the exchange on the model
  // clock: Streaming DiLoCo's tau overlapped steps).
  std::string overlap_land = "meeting";
  // < 0: the result is added as a correction, θ += θ̄' − θ_sent (the local steps since kept whole);
  // in [0, 1): Streaming DiLoCo's merge θ = α θ + (1 − α) θ̄'.
  double overlap_mix = -1;
  // > 0 (diloco): each site sends the top share of its pseudo-gradient (error feedback), summed
  // by the sparse scheme --sync; every round must be one clique of all sites (a common anchor).
  double pseudo_topk = 0;
  // With --pseudo-topk: the error-feedback residual's decay β per meeting, e ← β e + Δ
  // (SparseLoCo's accumulator, which stands in for the outer momentum); 1: plain error feedback.
  double pseudo_topk_decay = 1;
  std::string timeline;  // JSON lines: each unit's compute and sync on each rank (rank 0 writes)
  // Experiments only (src/train/faults.h), comma-separated: "corrupt:RANK:STEP:SCALE" scales
  // worker RANK's pseudo-gradient by SCALE (or makes it NaN with SCALE nan) at the first
  // synchronization at or after STEP; "straggler:RANK:FACTOR" makes rank RANK's compute FACTOR
  // times slower; "stall:PROB:SECONDS" stalls each rank SECONDS with probability PROB per step.
  std::string inject_fault;
  // A NaN or an infinity in a gradient (docs/reliability.md): "skip" (data-parallel: every rank
  // skips the optimizer step together; local SGD: that worker's inner step) or "fail" (the run
  // ends, naming the rank and the tensor).
  std::string nonfinite = "skip";
  double lr = 3e-3;        // dense parameters (AdamW), peak
  double embed_lr = 3e-3;  // embedding rows (lazy AdamW), peak
  double weight_decay = 0.01;
  int warmup_steps = 20;     // linear warm-up, then cosine decay to 10% of the peak
  std::string sync = "zen";  // sparse scheme for the embedding gradient (see atoll bench sync)
  // Worker threads per rank for the sync schemes that use them (Zen's aggregation and decode);
  // 0: the node's cores shared by the ranks on it (comm::resolve_threads; 1 under simulation).
  unsigned sync_threads = 0;
  // The embedding's gradient as rows (one index per row of E values; Zen carries them as rows,
  // the other schemes as elements) or, off, as elements (one index per value).
  bool embedding_rows = true;
  // Local SGD: each embedding row's pseudo-gradient averaged over the workers that touched the
  // row since the last synchronization ("touched"), or over all workers ("all", DiLoCo's dense
  // average, in which a row only one of n workers saw moves 1/n as far as that worker moved it).
  std::string embedding_mean = "all";
  double topk = 0;  // > 0: dense gradients top-k compressed (share kept), error feedback
  std::uint64_t bucket_bytes = 25ull << 20;  // dense allreduce bucket size
  int eval_every = 50;     // validation loss / perplexity every K steps (and at 0 and the end)
  int eval_windows = 256;  // validation sequences (spread over the split, shared out by rank)
  int log_every = 10;
  std::string out;           // directory: metrics.jsonl, checkpoints/, loss.png (rank 0 writes)
  int checkpoint_every = 0;  // steps; 0 = only at the end (when --out is set)
  int keep_checkpoints = 3;
  bool resume = false;       // continue from the newest checkpoint in out/checkpoints
  std::string resume_from;   // continue from this checkpoint file
  std::string dump_grads;    // write the embedding gradient of each rank as traces here
  int dump_grads_steps = 0;  // ... for the first N steps of this run only (0 = every step)
  bool plot = true;          // gnuplot loss curve at the end (out/loss.png)
  bool quiet = false;        // no progress lines
  // Benchmark mode: every step also synchronizes the same embedding gradient with each of these
  // schemes (results checked against the training scheme's), timing sync + row extraction in the
  // same step, so schemes are compared under the same machine speed (see docs/train.md).
  std::vector<std::string> compare_schemes;
  // Simulation only: > 0 charges the model's forward, backward and optimizer work as this many
  // simulated seconds per step instead of its measured time (synchronization work stays measured),
  // so that runs of different schemes see the same compute whatever the host's speed drift.
  double sim_compute_s = 0;
  // Simulation only, with sim_compute_s: charge the schemes' computation from this cost table
  // (atoll/comm/cpu_costs.h, written by `bench sync --cpu-cost-record`) instead of measuring it;
  // nothing else is charged, so two runs give the same simulated time.
  std::string cpu_cost;
};

// The preset's shape and batch. Throws std::invalid_argument for an unknown preset.
TrainConfig preset_config(const std::string& preset);

// Checks values that no flag parser can (ranges, consistency); returns the first problem.
std::optional<std::string> check_config(const TrainConfig& config);

// A gradient held a NaN or an infinity under --nonfinite fail. `agreed`: every rank throws it at
// once (data-parallel steps); else only the worker that found it (the job must be ended).
class NonFiniteGradientError : public std::runtime_error {
 public:
  NonFiniteGradientError(const std::string& message, bool agreed)
      : std::runtime_error(message), agreed_(agreed) {}
  bool agreed() const { return agreed_; }

 private:
  bool agreed_;
};

// Runs the training job on every rank of `comm` (collective). Returns the process exit code.
// Problems with the input (corpus, checkpoint, config) end in comm::CollectiveError on every rank.
int train(comm::Communicator& comm, const TrainConfig& config);

}  // namespace atl::train
