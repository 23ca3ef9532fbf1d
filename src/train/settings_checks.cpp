// check_config (include/atoll/train/trainer.h): the settings' ranges and the flags that apply
// only together, one message per problem, naming the flag (config-file keys are the same names).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "atoll/comm/communicator.h"
#include "atoll/comm/parallel.h"
#include "atoll/localsgd/penalty.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/trainer.h"
#include "faults.h"

namespace atl::train {

using comm::Communicator;

namespace {

// A-EDiT's settings, refused with any other strategy (a flag that would be ignored).
std::optional<std::string> check_aedit(const TrainConfig& c) {
  if (c.strategy == "aedit") {
    if (!(c.sync_seconds > 0) || !std::isfinite(c.sync_seconds)) {
      return fmt::format(
          "--sync-seconds {} must be a positive number of seconds (aedit: training time between "
          "synchronization rounds)",
          c.sync_seconds);
    }
    if (c.min_round_steps < 0) {
      return fmt::format("--min-round-steps {} is negative", c.min_round_steps);
    }
    if (!(c.step_weight >= 0 && c.step_weight <= 1)) {
      return fmt::format("--step-weight {} is not in [0, 1]", c.step_weight);
    }
    return std::nullopt;
  }
  const auto not_aedit = [&](const char* flag) {
    return fmt::format("{} applies to --strategy aedit only (this run has --strategy {})", flag,
                       c.strategy);
  };
  if (c.sync_seconds != 0) return not_aedit("--sync-seconds");
  if (c.min_round_steps != 1) return not_aedit("--min-round-steps");
  if (c.step_weight != 0) return not_aedit("--step-weight");
  return std::nullopt;
}

// The 2-D mesh's settings (that S divides the world size is checked where the world is known).
std::optional<std::string> check_mesh(const TrainConfig& c) {
  if (c.shard_group_size < 1) {
    return fmt::format("--shard-group-size {} must be at least 1 (ranks per worker)",
                       c.shard_group_size);
  }
  if (c.shard_group_size == 1) {
    if (!c.shard) return "--no-shard applies with --shard-group-size 2 or more (ranks per worker)";
    return std::nullopt;
  }
  if (c.topk > 0) return "--topk is not supported with --shard-group-size > 1";
  if (!c.compare_schemes.empty()) {
    return "--compare-schemes is not supported with --shard-group-size > 1";
  }
  return std::nullopt;
}

// Training across sites (that the world matches the sites is checked where both are known).
std::optional<std::string> check_sites(const TrainConfig& c) {
  const bool sites = !c.topology.empty();
  if (!sites) {
    for (const auto& [flag, set] : {std::pair{"--schedule", c.schedule != "planned"},
                                    {"--fpga-memory", c.fpga_memory != 0},
                                    {"--egress-gbps", c.egress_gbps != 0},
                                    {"--ingress-gbps", c.ingress_gbps != 0},
                                    {"--transport", c.transport != "best"},
                                    {"--compute-s", c.compute_s != 0},
                                    {"--site-speed", !c.site_speed.empty()},
                                    {"--overlap-rounds", c.overlap_rounds != 0},
                                    {"--overlap-land", c.overlap_land != "meeting"},
                                    {"--overlap-mix", c.overlap_mix >= 0},
                                    {"--pseudo-topk", c.pseudo_topk != 0},
                                    {"--pseudo-topk-decay", c.pseudo_topk_decay != 1}}) {
      if (set) return fmt::format("{} applies with --topology (training across sites)", flag);
    }
    return std::nullopt;
  }
  if (c.embedding_mean == "touched") {
    return "--embedding-mean touched is built for local SGD in one cluster; across sites a "
           "clique averages the whole parameters (docs/wan-train.md)";
  }
  if (c.strategy == "aedit") {  // rounds by the model clock, which every site must know
    if (!(c.compute_s > 0)) {
      return "--strategy aedit with --topology needs --compute-s (its rounds come by the model "
             "clock, which every site must know to end the run at the same round)";
    }
    if (c.min_round_steps != 1) {
      return "--min-round-steps applies to aedit without --topology (across sites every site "
             "takes at least one step per round)";
    }
    if (c.step_weight != 0 && !c.penalty) {
      return "--step-weight with --topology weighs EDiT's penalty weights: it needs the penalty "
             "(not --no-penalty)";
    }
  }
  if (c.shard_group_size != 1) {  // the 2-D mesh: a site is a shard group (site_training.h)
    if (c.strategy == "ddp") {
      return "--strategy ddp with --topology runs one rank per site (--shard-group-size > 1 "
             "applies to local SGD across sites)";
    }
    if (c.shard) {
      return "--topology with --shard-group-size > 1 needs --no-shard: every rank of a site "
             "holds the whole model (ZeRO-3 inside a site is not built); the site's exchange and "
             "outer state are split over its ranks either way";
    }
    if (c.penalty && c.strategy != "diloco") {
      return fmt::format(
          "--strategy {} with --topology and --shard-group-size > 1 needs --no-penalty: EDiT's "
          "penalty over a site's slices is not built (its per-layer norms span the site's ranks)",
          c.strategy);
    }
  }
  if (c.topk > 0)
    return "--topology with --topk is not built yet (the residuals of ddp across sites)";
  if (c.overlap_rounds != 0 && c.overlap_rounds != 1) {
    return fmt::format("--overlap-rounds {} must be 0 or 1 (rounds in flight)", c.overlap_rounds);
  }
  if (c.overlap_rounds != 0 && c.strategy == "ddp") {
    return "--overlap-rounds applies to --strategy diloco, edit and aedit (ddp syncs every step)";
  }
  if (c.overlap_land != "meeting" && c.overlap_land != "arrival") {
    return fmt::format("--overlap-land {} must be meeting or arrival", c.overlap_land);
  }
  if ((c.overlap_land != "meeting" || c.overlap_mix >= 0) && c.overlap_rounds == 0) {
    return c.overlap_mix >= 0 ? "--overlap-mix applies with --overlap-rounds 1"
                              : "--overlap-land applies with --overlap-rounds 1";
  }
  if (c.overlap_mix >= 0 && !(c.overlap_mix < 1)) {
    return fmt::format(
        "--overlap-mix {} must be in [0, 1) (the local parameters' weight in the merge; 1 would "
        "never apply the meeting's result)",
        c.overlap_mix);
  }
  if (!(c.pseudo_topk >= 0 && c.pseudo_topk <= 1)) {
    return fmt::format(
        "--pseudo-topk {} must be in (0, 1] (the share of the pseudo-gradient "
        "each site sends), or 0 (dense)",
        c.pseudo_topk);
  }
  if (!(c.pseudo_topk_decay > 0 && c.pseudo_topk_decay <= 1)) {
    return fmt::format(
        "--pseudo-topk-decay {} must be in (0, 1] (the error-feedback residual's decay per "
        "meeting; 1: none)",
        c.pseudo_topk_decay);
  }
  if (c.pseudo_topk_decay != 1 && c.pseudo_topk == 0) {
    return "--pseudo-topk-decay applies with --pseudo-topk (the sparse pseudo-gradients' "
           "error feedback)";
  }
  if (c.pseudo_topk > 0 && c.strategy != "diloco") {
    return "--pseudo-topk applies to --strategy diloco (a pseudo-gradient per meeting)";
  }
  if (c.pseudo_topk > 0 && c.transport == "multicast_fpga") {
    return "--pseudo-topk sends sparse pseudo-gradients point to point (the sparse schemes): "
           "--transport multicast_fpga does not apply (use unicast or best)";
  }
  if (c.transport != "unicast" && c.transport != "multicast_fpga" && c.transport != "best") {
    return fmt::format("--transport {} is not unicast, multicast_fpga or best", c.transport);
  }
  for (const auto& [flag, v] : {std::pair{"--fpga-memory", c.fpga_memory},
                                {"--egress-gbps", c.egress_gbps},
                                {"--ingress-gbps", c.ingress_gbps},
                                {"--compute-s", c.compute_s}}) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return fmt::format("{} {} must be a finite number >= 0 (0: the default)", flag, v);
    }
  }
  return std::nullopt;
}

// The model's shape and output head.
std::optional<std::string> check_model(const TrainConfig& c) {
  const auto& m = c.model;
  if (m.vocab < 3) return fmt::format("--vocab {} must be at least 3", m.vocab);
  if (m.d_embed < 1) return fmt::format("--d-embed {} must be positive", m.d_embed);
  if (m.d_model < 1) return fmt::format("--d-model {} must be positive", m.d_model);
  if (m.heads < 1 || m.d_model % m.heads != 0) {
    return fmt::format("--d-model {} is not divisible by --heads {}", m.d_model, m.heads);
  }
  if (m.layers < 0) return fmt::format("--layers {} is negative", m.layers);
  if (m.seq_len < 1) return fmt::format("--seq-len {} must be positive", m.seq_len);
  if (m.head != "full" && m.head != "adaptive") {
    return fmt::format("--head '{}' is not full or adaptive", m.head);
  }
  if (m.head == "adaptive") {
    if (m.cutoffs.empty()) return "--head adaptive needs --cutoffs";
    std::int64_t prev = 0;
    for (auto cut : m.cutoffs) {
      if (cut <= prev || cut >= m.vocab) {
        return fmt::format("--cutoffs must ascend within (0, --vocab {}), got {}", m.vocab, cut);
      }
      prev = cut;
    }
  }
  return std::nullopt;
}

// What only simulation (scripts/simulate) charges: fixed model compute, a cpu cost table.
std::optional<std::string> check_simulation(const TrainConfig& c) {
  if (!(c.sim_compute_s >= 0) || !std::isfinite(c.sim_compute_s)) {
    return fmt::format("--sim-compute-s {} must be a finite number >= 0", c.sim_compute_s);
  }
  if (c.sim_compute_s > 0 && !Communicator::simulated()) {
    return "--sim-compute-s applies only under simulation (scripts/simulate ... -- train); under "
           "mpirun the compute is real";
  }
  if (!c.cpu_cost.empty() && !(c.sim_compute_s > 0)) {
    return "--cpu-cost charges the sync's computation from a table and nothing else is measured: "
           "it needs --sim-compute-s (the model's compute per step), or the model would cost no "
           "simulated time";
  }
  return std::nullopt;
}

// The strategy and the flags that depend on it (A-EDiT, the penalty, faults, overlaps, the
// 2-D mesh, sites, non-finite gradients, the optimizer).
std::optional<std::string> check_strategy(const TrainConfig& c) {
  if (c.strategy != "ddp" && c.strategy != "diloco" && c.strategy != "edit" &&
      c.strategy != "aedit") {
    return fmt::format("--strategy: unknown strategy '{}' (valid: ddp, diloco, edit, aedit)",
                       c.strategy);
  }
  if (auto problem = check_aedit(c)) return problem;
  const localsgd::PenaltyOptions penalty{c.penalty,     c.anomaly_threshold,  c.ewma_alpha,
                                         c.ewma_warmup, c.weight_temperature, c.clip};
  if (auto problem = penalty.check()) return problem;
  try {
    const auto faults = parse_faults(c.inject_fault);
    if (faults.corrupt && c.strategy == "ddp") {
      return "--inject-fault corrupt:... corrupts a pseudo-gradient: it needs a local-SGD "
             "--strategy (diloco, edit, aedit)";
    }
    if (faults.process && Communicator::simulated()) {
      return "--inject-fault kill:... and stop:... end or freeze a process: under SMPI every rank "
             "is one process";
    }
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  if (c.backward_overlap && c.topk > 0) {
    return "--backward-overlap does not apply with --topk (top-k selects over the whole gradient "
           "after the backward pass)";
  }
  if (c.backward_overlap && c.shard_group_size > 1 && c.shard) {
    return "--backward-overlap does not apply to sharded parameters (they are reduce-scattered "
           "after the backward pass; --no-shard replicates them)";
  }
  if (!c.overlap && c.strategy != "edit" && c.strategy != "aedit") {
    return fmt::format(
        "--no-overlap switches off EDiT's layer-wise overlap: it applies to --strategy edit or "
        "aedit only (this run has --strategy {})",
        c.strategy);
  }
  if (auto problem = check_mesh(c)) return problem;
  if (auto problem = check_sites(c)) return problem;
  if (c.sync_prefetch < 0) {
    return fmt::format("--sync-prefetch {} is negative (layers in flight ahead; 0 = all)",
                       c.sync_prefetch);
  }
  if (c.nonfinite != "skip" && c.nonfinite != "fail") {
    return fmt::format("--nonfinite: unknown action '{}' (valid: skip, fail)", c.nonfinite);
  }
  if (c.optimizer != "adamw" && c.optimizer != "sgd") {
    return fmt::format("--optimizer: unknown optimizer '{}' (valid: adamw, sgd)", c.optimizer);
  }
  return std::nullopt;
}

// Local SGD's synchronization, and the ddp-only flags refused with it.
std::optional<std::string> check_local_sgd(const TrainConfig& c) {
  if (c.sync_every < 1) {
    return fmt::format("--sync-every {} must be at least 1 (inner steps per synchronization)",
                       c.sync_every);
  }
  if (c.sync_warmup_steps < 0) {
    return fmt::format("--sync-warmup-steps {} is negative", c.sync_warmup_steps);
  }
  if (!(c.outer_lr > 0) || !std::isfinite(c.outer_lr)) {
    return fmt::format("--outer-lr {} must be a positive number", c.outer_lr);
  }
  if (!(c.outer_momentum >= 0 && c.outer_momentum < 1)) {
    return fmt::format("--outer-momentum {} is not in [0, 1)", c.outer_momentum);
  }
  if (c.embedding_mean != "all" && c.embedding_mean != "touched") {
    return fmt::format("--embedding-mean: unknown mean '{}' (valid: all, touched)",
                       c.embedding_mean);
  }
  if (c.embedding_mean != "all" && c.strategy == "ddp") {
    return "--embedding-mean averages local SGD's pseudo-gradients: it applies to diloco, edit "
           "and aedit (this run has --strategy ddp)";
  }
  if (c.strategy != "ddp" && c.topk > 0) {
    return fmt::format(
        "--topk compresses data-parallel gradients: it applies to --strategy ddp "
        "only (this run has --strategy {})",
        c.strategy);
  }
  if (c.strategy != "ddp" && !c.compare_schemes.empty()) {
    return fmt::format(
        "--compare-schemes compares per-step gradient synchronization: it applies "
        "to --strategy ddp only (this run has --strategy {})",
        c.strategy);
  }
  return std::nullopt;
}

// Steps, rates, evaluation, checkpoints and resumption.
std::optional<std::string> check_steps(const TrainConfig& c) {
  if (c.batch < 1) return fmt::format("--batch {} must be positive", c.batch);
  if (c.steps < 0) return fmt::format("--steps {} is negative", c.steps);
  if (!(c.lr > 0)) return fmt::format("--lr {} must be positive", c.lr);
  if (!(c.embed_lr > 0)) return fmt::format("--embed-lr {} must be positive", c.embed_lr);
  if (!(c.weight_decay >= 0)) return fmt::format("--weight-decay {} is negative", c.weight_decay);
  if (c.warmup_steps < 0) return fmt::format("--warmup-steps {} is negative", c.warmup_steps);
  if (!(c.topk >= 0 && c.topk < 1)) return fmt::format("--topk {} is not in [0, 1)", c.topk);
  if (c.bucket_bytes < 4) {
    return fmt::format("--bucket-bytes {} must hold at least one float (4 bytes)", c.bucket_bytes);
  }
  if (c.eval_every < 0) return fmt::format("--eval-every {} is negative", c.eval_every);
  if (c.eval_windows < 1)
    return fmt::format("--eval-windows {} must be at least 1", c.eval_windows);
  if (c.log_every < 1) return fmt::format("--log-every {} must be positive", c.log_every);
  if (c.checkpoint_every < 0) {
    return fmt::format("--checkpoint-every {} is negative", c.checkpoint_every);
  }
  if (c.keep_checkpoints < 1) {
    return fmt::format("--keep-checkpoints {} must be at least 1", c.keep_checkpoints);
  }
  if (c.dump_grads_steps < 0) {
    return fmt::format("--dump-grads-steps {} is negative", c.dump_grads_steps);
  }
  if ((c.resume || !c.resume_from.empty() || c.checkpoint_every > 0) && c.out.empty()) {
    return "--checkpoint-every, --resume and --resume-from need --out DIR";
  }
  if (c.resume && !c.resume_from.empty()) return "--resume and --resume-from exclude each other";
  return std::nullopt;
}

// The sync schemes named and their threads.
std::optional<std::string> check_schemes(const TrainConfig& c) {
  const auto& names = sync::scheme_names();
  auto valid = [&] {
    std::string v;
    for (const auto& n : names) v += (v.empty() ? "" : ", ") + n;
    return v;
  };
  auto known = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  if (!known(c.sync))
    return fmt::format("--sync: unknown scheme '{}' (valid: {})", c.sync, valid());
  if (c.sync_threads > comm::machine_cores()) {
    return fmt::format(
        "--sync-threads {}: this machine has {} cores (threads per rank are at most "
        "its cores)",
        c.sync_threads, comm::machine_cores());
  }
  for (const auto& n : c.compare_schemes) {
    if (!known(n)) {
      return fmt::format("--compare-schemes: unknown scheme '{}' (valid: {})", n, valid());
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> check_config(const TrainConfig& c) {
  for (auto check : {check_model, check_simulation, check_strategy, check_local_sgd, check_steps,
                     check_schemes}) {
    if (auto problem = check(c)) return problem;
  }
  return std::nullopt;
}

}  // namespace atl::train
