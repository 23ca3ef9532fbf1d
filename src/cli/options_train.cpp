// The options of `atoll train` and its config file (options.h).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "atoll/sync/scheme.h"
#include "config_file.h"
#include "options.h"

namespace atl::cli {

TrainCommand add_train_command(CLI::App& app, train::TrainConfig& tc) {
  TrainCommand t;
  auto& preset_fields = t.preset_fields;
  auto* train_cmd = t.cmd = app.add_subcommand(
      "train",
      "train a GPT-style language model data-parallel (run under mpirun or scripts/simulate)");
  // The config file is an option of the top-level app whose items belong to `train` (CLI11 reads
  // config files at that level); fallthrough lets `atoll train --config FILE` name it after train.
  app.config_formatter(std::make_shared<JsonOrTomlConfig>(train_cmd));
  app.set_config("--config", "", "atoll train: config file (JSON or TOML, keys = option names)");
  train_cmd->fallthrough();
  auto preset_opt = [&](CLI::Option* o, auto member) {
    preset_fields.emplace_back(o, [&tc, member](const atl::train::TrainConfig& p) {
      member(tc) = member(const_cast<atl::train::TrainConfig&>(p));
    });
  };
  train_cmd
      ->add_option("--preset", tc.preset,
                   "model preset: tiny (tests, demo) | small (embedding-heavy) | base (local SGD: "
                   "8 layers, embedding 28%)")
      ->check(CLI::IsMember({"tiny", "small", "base"}));
  preset_opt(
      train_cmd->add_option("--vocab", tc.model.vocab,
                            "vocabulary size = embedding rows (with <eos>, <unk>)"),
      [](auto& c) -> auto& { return c.model.vocab; });
  preset_opt(
      train_cmd->add_option("--d-embed", tc.model.d_embed, "embedding width"),
      [](auto& c) -> auto& { return c.model.d_embed; });
  preset_opt(
      train_cmd->add_option("--d-model", tc.model.d_model, "transformer width"),
      [](auto& c) -> auto& { return c.model.d_model; });
  preset_opt(
      train_cmd->add_option("--layers", tc.model.layers, "transformer blocks"),
      [](auto& c) -> auto& { return c.model.layers; });
  preset_opt(
      train_cmd->add_option("--heads", tc.model.heads, "attention heads"),
      [](auto& c) -> auto& { return c.model.heads; });
  preset_opt(
      train_cmd->add_option("--seq-len", tc.model.seq_len, "tokens per sequence"),
      [](auto& c) -> auto& { return c.model.seq_len; });
  preset_opt(
      train_cmd->add_option("--head", tc.model.head, "output layer: full | adaptive")
          ->check(CLI::IsMember({"full", "adaptive"})),
      [](auto& c) -> auto& { return c.model.head; });
  preset_opt(
      train_cmd->add_option("--cutoffs", tc.model.cutoffs, "adaptive head cluster cutoffs"),
      [](auto& c) -> auto& { return c.model.cutoffs; });
  preset_opt(
      train_cmd->add_option("--batch", tc.batch, "sequences per rank per step"),
      [](auto& c) -> auto& { return c.batch; });
  preset_opt(
      train_cmd->add_option("--steps", tc.steps, "optimizer steps"),
      [](auto& c) -> auto& { return c.steps; });
  train_cmd->add_option("--corpus", tc.corpus,
                        "Brown corpus directory (default: the cache of scripts/fetch-corpus)");
  train_cmd->add_option("--seed", tc.seed, "seed (initialisation and batches)");
  train_cmd
      ->add_option("--strategy", tc.strategy,
                   "ddp (data-parallel, the default) | diloco (local SGD, outer Nesterov step) | "
                   "edit (diloco + the pseudo-gradient penalty per layer) | aedit (edit with "
                   "time-based rounds: --sync-seconds)")
      ->check(CLI::IsMember({"ddp", "diloco", "edit", "aedit"}));
  t.sync_every = train_cmd->add_option("--sync-every", tc.sync_every,
                                       "diloco, edit: inner steps H between synchronizations");
  train_cmd->add_option("--sync-warmup-steps", tc.sync_warmup_steps,
                        "diloco: data-parallel steps before local steps begin (not --warmup-steps, "
                        "the learning-rate warm-up)");
  train_cmd->add_option("--sync-seconds", tc.sync_seconds,
                        "aedit: seconds of training time between synchronization rounds "
                        "(with --topology: of each site's model clock)");
  train_cmd->add_option("--min-round-steps", tc.min_round_steps,
                        "aedit: skip a round in which all workers together took fewer local steps "
                        "since the last sync (default 1)");
  train_cmd->add_option("--step-weight", tc.step_weight,
                        "aedit: r in [0, 1]: a worker's weight (1-r)·w + r·(its share of the "
                        "round's local steps)");
  train_cmd->add_option("--outer-lr", tc.outer_lr, "diloco: outer SGD learning rate");
  train_cmd->add_option("--outer-momentum", tc.outer_momentum,
                        "diloco: outer Nesterov momentum (0 = plain SGD)");
  train_cmd->add_flag("--no-penalty{false}", tc.penalty,
                      "edit: plain averaging instead of the pseudo-gradient penalty");
  train_cmd->add_option("--anomaly-threshold", tc.anomaly_threshold,
                        "edit: z-score above which a worker's pseudo-gradient norm is an outlier");
  train_cmd->add_option("--ewma-alpha", tc.ewma_alpha,
                        "edit: EWMA weight of a new norm, in (0, 1)");
  train_cmd->add_option("--ewma-warmup", tc.ewma_warmup,
                        "edit: synchronizations before anomaly detection starts");
  train_cmd->add_option("--weight-temperature", tc.weight_temperature,
                        "edit: T of the softmax(-norm / T) worker weights");
  train_cmd->add_option("--clip", tc.clip,
                        "edit: clip each layer's averaged pseudo-gradient norm "
                        "to this (0 = off)");
  train_cmd->add_flag("--no-overlap{false}", tc.overlap,
                      "edit: complete the layer-wise synchronization at the sync point instead of "
                      "overlapping it with the next forward pass");
  train_cmd->add_flag("--backward-overlap", tc.backward_overlap,
                      "synchronous steps: sum each unit's dense gradients as soon as its backward "
                      "ends (non-blocking, as PyTorch's DDP) instead of after the backward pass");
  train_cmd->add_option("--sync-prefetch", tc.sync_prefetch,
                        "edit: layers whose synchronization is in flight ahead of the one "
                        "computing (default 0: all, posted when the forward pass begins)");
  train_cmd->add_option("--shard-group-size", tc.shard_group_size,
                        "2-D mesh: ranks per worker (S consecutive ranks average gradients every "
                        "step and share one local-SGD state, split 1/S over them); S divides "
                        "the number of ranks");
  train_cmd->add_flag("--no-shard{false}", tc.shard,
                      "2-D mesh: every rank of a worker keeps the whole local-SGD state "
                      "(the replicated reference)");
  train_cmd->add_option("--topology", tc.topology,
                        "train across sites: the planner's sites CSV (e.g. data/cities-9.csv); "
                        "each rank is one site (docs/wan-train.md)");
  train_cmd->add_option("--schedule", tc.schedule,
                        "sites: planned (the planner's schedule for the model's payload), "
                        "all-to-all, or a schedule file (atoll plan --schedule-out)");
  train_cmd->add_option("--fpga-memory", tc.fpga_memory,
                        "sites: FPGA memory per site in bytes (default: the topology file's)");
  train_cmd->add_option("--egress-gbps", tc.egress_gbps,
                        "sites: WAN egress per site, Gbit/s (default: the topology file's)");
  train_cmd->add_option("--ingress-gbps", tc.ingress_gbps,
                        "sites: WAN ingress per site, Gbit/s (default: the topology file's)");
  train_cmd->add_option("--transport", tc.transport,
                        "sites: unicast, multicast_fpga or best (each clique the fastest of "
                        "multicast + FPGA, unicast and ring, as the planner does)");
  train_cmd->add_option("--compute-s", tc.compute_s,
                        "sites: model-clock seconds per local step (default 0: the measured "
                        "time of the step's model work)");
  train_cmd->add_option("--site-speed", tc.site_speed,
                        "sites: CODE:FACTOR,... (a site computes FACTOR times as fast)");
  train_cmd->add_option("--overlap-rounds", tc.overlap_rounds,
                        "sites, diloco: 1 lets a meeting's exchange run behind the next "
                        "--sync-every local steps (its result applied one round stale); 0: wait");
  train_cmd->add_option("--overlap-land", tc.overlap_land,
                        "sites, --overlap-rounds 1: apply the exchange's result at the next "
                        "meeting (meeting, default) or after the first local step that ends past "
                        "its arrival on the model clock (arrival)");
  train_cmd->add_option("--overlap-mix", tc.overlap_mix,
                        "sites, --overlap-rounds 1: Streaming DiLoCo's merge of the result, "
                        "theta = a theta + (1 - a) new anchor, a in [0, 1) (default: add the "
                        "result as a correction, keeping the local steps made meanwhile)");
  train_cmd->add_option("--pseudo-topk", tc.pseudo_topk,
                        "sites, diloco: each site sends the top share (0, 1] of its "
                        "pseudo-gradient with error feedback, summed by the --sync scheme (every "
                        "round one clique of all sites); 0: dense");
  train_cmd->add_option("--pseudo-topk-decay", tc.pseudo_topk_decay,
                        "sites, --pseudo-topk: the error-feedback residual's decay b in (0, 1] "
                        "per meeting, e = b e + delta (SparseLoCo's accumulator, with "
                        "--outer-momentum 0); 1: plain error feedback");
  train_cmd->add_option("--timeline", tc.timeline,
                        "write each layer's compute and sync times on every rank to FILE "
                        "(JSON lines)");
  train_cmd->add_option(
      "--inject-fault", tc.inject_fault,
      "experiments, comma-separated: corrupt:RANK:STEP:SCALE scales worker RANK's "
      "pseudo-gradient (nan: NaN) at the first sync at or after STEP; "
      "straggler:RANK:FACTOR makes RANK's compute FACTOR times slower; "
      "stall:PROB:SECONDS stalls each rank with probability PROB per step; "
      "stop:RANK:STEP stops RANK (SIGSTOP) after STEP's backward pass; "
      "nan:RANK:STEP puts a NaN in RANK's gradient at STEP");
  train_cmd
      ->add_option("--nonfinite", tc.nonfinite,
                   "a NaN or infinity in a gradient: skip (the step, on every rank under ddp; "
                   "the worker's inner step under local SGD) | fail (the run ends, naming the "
                   "rank and tensor)")
      ->check(CLI::IsMember({"skip", "fail"}));
  train_cmd
      ->add_option("--optimizer", tc.optimizer,
                   "inner optimizer: adamw | sgd (plain SGD: no momentum, no weight decay)")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  train_cmd->add_option("--lr", tc.lr, "peak learning rate, dense parameters (AdamW)");
  train_cmd->add_option("--embed-lr", tc.embed_lr,
                        "peak learning rate, embedding rows (lazy AdamW)");
  train_cmd->add_option("--weight-decay", tc.weight_decay, "decoupled weight decay");
  train_cmd->add_option("--warmup-steps", tc.warmup_steps,
                        "linear warm-up steps, then cosine decay");
  std::string sync_names;
  for (const auto& n : atl::sync::scheme_names()) sync_names += (sync_names.empty() ? "" : "|") + n;
  train_cmd->add_option("--sync", tc.sync, "embedding gradient scheme: " + sync_names)
      ->check(CLI::IsMember(atl::sync::scheme_names()));
  train_cmd->add_option("--topk", tc.topk, "top-k share for dense gradients (0 = dense allreduce)")
      ->check(CLI::Range(0.0, 0.999999));
  train_cmd->add_option("--bucket-bytes", tc.bucket_bytes, "dense allreduce bucket size");
  train_cmd->add_option("--sync-threads", tc.sync_threads,
                        "worker threads per rank for Zen's aggregation and decode (default: the "
                        "node's cores shared by its ranks; 1 under simulation); at most the "
                        "machine's cores");
  train_cmd->add_option("--embedding-rows", tc.embedding_rows,
                        "the embedding's gradient as rows, one index per row on Zen's wire "
                        "(default true); false: one index per value");
  train_cmd->add_option("--embedding-mean", tc.embedding_mean,
                        "local SGD: each embedding row's pseudo-gradient averaged over all "
                        "workers (all, the default) or over those that touched the row (touched)");
  train_cmd->add_option("--eval-every", tc.eval_every, "validation every K steps (0 = never)");
  train_cmd->add_option("--eval-windows", tc.eval_windows, "validation sequences");
  train_cmd->add_option("--log-every", tc.log_every, "progress line every K steps");
  train_cmd->add_option("--out", tc.out, "output directory: metrics.jsonl, checkpoints/, loss.png");
  train_cmd->add_option("--checkpoint-every", tc.checkpoint_every,
                        "checkpoint every K steps (and at the end)");
  train_cmd->add_option("--keep-checkpoints", tc.keep_checkpoints, "checkpoints kept");
  train_cmd->add_flag("--resume", tc.resume, "continue from the newest checkpoint in --out");
  train_cmd->add_option("--resume-from", tc.resume_from, "continue from this checkpoint file");
  train_cmd->add_option("--dump-grads", tc.dump_grads,
                        "write embedding gradients as traces to this directory");
  train_cmd->add_option("--dump-grads-steps", tc.dump_grads_steps,
                        "... only for the first N steps (0 = every step)");
  train_cmd->add_option("--plot", tc.plot,
                        "draw out/loss.png with gnuplot at the end (true|false)");
  train_cmd->add_flag("--quiet", tc.quiet, "no progress lines or report");
  train_cmd
      ->add_option("--compare-schemes", tc.compare_schemes,
                   "benchmark: also sync each step's embedding gradient with these schemes "
                   "(comma-separated), checked and timed in the same step")
      ->delimiter(',')
      ->check(CLI::IsMember(atl::sync::scheme_names()));
  train_cmd->add_option("--sim-compute-s", tc.sim_compute_s,
                        "simulation only: charge forward, backward and optimizer as this many "
                        "seconds per step instead of measuring them (0 = measured)");
  train_cmd->add_option("--cpu-cost", tc.cpu_cost,
                        "simulation only, with --sim-compute-s: charge the sync's computation "
                        "from this cost table (bench sync --cpu-cost-record) instead of measuring "
                        "it; nothing else is charged, so runs repeat exactly");
  return t;
}

void finish_train_options(const TrainCommand& train, train::TrainConfig& tc) {
  if (!train.cmd->parsed()) return;
  if (tc.preset != "tiny") {
    const auto p = train::preset_config(tc.preset);
    for (const auto& [opt, copy] : train.preset_fields) {
      if (opt->count() == 0) copy(p);
    }
  }
  // A flag the strategy would ignore (its default cannot be told from a value given).
  if (train.sync_every->count() > 0 && tc.strategy != "diloco" && tc.strategy != "edit") {
    throw CLI::ValidationError(fmt::format(
        "--sync-every applies to --strategy diloco or edit (this run has --strategy {}{})",
        tc.strategy, tc.strategy == "aedit" ? ": its rounds are timed by --sync-seconds" : ""));
  }
}

}  // namespace atl::cli
