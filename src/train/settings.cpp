#include "settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "atoll/comm/cpu_costs.h"
#include "atoll/comm/parallel.h"
#include "atoll/localsgd/penalty.h"
#include "atoll/sync/scheme.h"
#include "atoll/util/files.h"
#include "faults.h"

namespace atl::train {

using comm::Communicator;

TrainConfig preset_config(const std::string& preset) {
  TrainConfig c;
  c.preset = preset;
  if (preset == "tiny") {
    // Fast on 2 cores: the demo and the tests.
    c.model = ModelShape{16384, 64, 64, 2, 4, 32, "full", {}};
    c.batch = 16;
    c.steps = 300;
  } else if (preset == "small") {
    // Embedding-heavy, the shape of the Zen paper's LSTM language model: a 32k-word vocabulary
    // embedded in 1024 dimensions (33.5 M parameters) projected to a 128-wide transformer; an
    // adaptive softmax keeps the output layer small (so the embedding dominates the parameters).
    c.model = ModelShape{32768, 1024, 128, 2, 4, 32, "adaptive", {2000, 10000}};
    c.batch = 8;
    c.steps = 2000;
  } else if (preset == "base") {
    // For local SGD: most parameters in the transformer blocks (8 × 0.79 M) and the full output
    // layer (4.2 M), the embedding 28% of 14.9 M, so that layer-wise synchronization has compute
    // to hide behind (in `small` the embedding is 96% and the first thing the forward pass uses).
    c.model = ModelShape{16384, 256, 256, 8, 8, 64, "full", {}};
    c.batch = 16;
    c.steps = 1000;
  } else {
    throw std::invalid_argument(
        fmt::format("unknown preset '{}' (valid: tiny, small, base)", preset));
  }
  return c;
}

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
                                    {"--pseudo-topk", c.pseudo_topk != 0}}) {
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

}  // namespace

// Messages name the flags (config-file keys are the same names).
std::optional<std::string> check_config(const TrainConfig& c) {
  const auto& m = c.model;
  if (m.vocab < 3) return fmt::format("--vocab {} must be at least 3", m.vocab);
  if (m.d_embed < 1) return fmt::format("--d-embed {} must be positive", m.d_embed);
  if (m.d_model < 1) return fmt::format("--d-model {} must be positive", m.d_model);
  if (m.heads < 1 || m.d_model % m.heads != 0) {
    return fmt::format("--d-model {} is not divisible by --heads {}", m.d_model, m.heads);
  }
  if (m.layers < 0) return fmt::format("--layers {} is negative", m.layers);
  if (m.seq_len < 1) return fmt::format("--seq-len {} must be positive", m.seq_len);
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

void agree_settings(Communicator& comm, const TrainConfig& c) {
  const auto& m = c.model;
  const nlohmann::json mine{{"preset", c.preset},
                            {"vocab", m.vocab},
                            {"d-embed", m.d_embed},
                            {"d-model", m.d_model},
                            {"layers", m.layers},
                            {"heads", m.heads},
                            {"seq-len", m.seq_len},
                            {"head", m.head},
                            {"cutoffs", m.cutoffs},
                            {"batch", c.batch},
                            {"steps", c.steps},
                            {"seed", c.seed},
                            {"lr", c.lr},
                            {"embed-lr", c.embed_lr},
                            {"weight-decay", c.weight_decay},
                            {"warmup-steps", c.warmup_steps},
                            {"sync", c.sync},
                            {"strategy", c.strategy},
                            {"optimizer", c.optimizer},
                            {"sync-every", c.sync_every},
                            {"sync-warmup-steps", c.sync_warmup_steps},
                            {"sync-seconds", c.sync_seconds},
                            {"min-round-steps", c.min_round_steps},
                            {"step-weight", c.step_weight},
                            {"outer-lr", c.outer_lr},
                            {"outer-momentum", c.outer_momentum},
                            {"embedding-mean", c.embedding_mean},
                            {"penalty", c.penalty},
                            {"anomaly-threshold", c.anomaly_threshold},
                            {"ewma-alpha", c.ewma_alpha},
                            {"ewma-warmup", c.ewma_warmup},
                            {"weight-temperature", c.weight_temperature},
                            {"clip", c.clip},
                            {"overlap", c.overlap},
                            {"backward-overlap", c.backward_overlap},
                            {"sync-prefetch", c.sync_prefetch},
                            {"shard-group-size", c.shard_group_size},
                            {"shard", c.shard},
                            {"topology", c.topology},
                            {"schedule", c.schedule},
                            {"fpga-memory", c.fpga_memory},
                            {"egress-gbps", c.egress_gbps},
                            {"ingress-gbps", c.ingress_gbps},
                            {"transport", c.transport},
                            {"compute-s", c.compute_s},
                            {"site-speed", c.site_speed},
                            {"overlap-rounds", c.overlap_rounds},
                            {"overlap-land", c.overlap_land},
                            {"overlap-mix", c.overlap_mix},
                            {"pseudo-topk", c.pseudo_topk},
                            {"timeline", !c.timeline.empty()},
                            {"inject-fault", c.inject_fault},
                            {"nonfinite", c.nonfinite},
                            {"topk", c.topk},
                            {"bucket-bytes", c.bucket_bytes},
                            {"eval-every", c.eval_every},
                            {"eval-windows", c.eval_windows},
                            {"log-every", c.log_every},
                            {"out", !c.out.empty()},
                            {"checkpoint-every", c.checkpoint_every},
                            {"keep-checkpoints", c.keep_checkpoints},
                            {"resume", c.resume || !c.resume_from.empty()},
                            {"dump-grads", !c.dump_grads.empty()},
                            {"dump-grads-steps", c.dump_grads_steps},
                            {"compare-schemes", c.compare_schemes},
                            {"sim-compute-s", c.sim_compute_s},
                            {"cpu-cost", c.cpu_cost}};
  std::string text = mine.dump();
  std::uint64_t length = text.size();
  comm.broadcast(std::span<std::uint64_t>(&length, 1), 0);
  std::string leader(length, '\0');
  if (comm.rank() == 0) leader = text;
  comm.broadcast(std::span<char>(leader.data(), leader.size()), 0);
  std::optional<std::string> problem;
  if (leader != text) {
    const auto theirs = nlohmann::json::parse(leader, nullptr, false);
    for (const auto& [key, value] : mine.items()) {
      if (theirs.is_discarded() || !theirs.contains(key) || theirs[key] != value) {
        problem = fmt::format(
            "this rank's settings differ from rank 0's: --{} {} here, {} on rank 0 (every rank "
            "must be started with the same options)",
            key, value.dump(),
            theirs.is_discarded() ? "?" : theirs.value(key, nlohmann::json()).dump());
        break;
      }
    }
    if (!problem) problem = "this rank's settings differ from rank 0's";
  }
  comm.agree(problem);
}

namespace {
// --cpu-cost: every rank loads the table and charges from it (before any sub-communicator is made:
// they share the world's mode). A bad file fails every rank; rank 0 names the operations the
// table has no samples of (charged 0).
void set_cpu_table(Communicator& comm, const std::string& file) {
  auto charging = std::make_shared<comm::CpuCharging>();
  std::optional<std::string> problem;
  try {
    charging->table = comm::CpuCostTable::load(file);
    charging->mode = comm::CpuCharging::Mode::table;
  } catch (const std::exception& e) {
    problem = fmt::format("--cpu-cost {}: {}", file, e.what());
  }
  comm.agree(problem);
  const auto zero = charging->table.unmeasured();
  comm.set_cpu_charging(std::move(charging));  // simulated: checked by check_config
  if (!zero.empty() && comm.rank() == 0) {
    fmt::print(stderr, "atoll: warning: {} has no samples of {}: charged 0\n", file,
               fmt::join(zero, ", "));
  }
}
}  // namespace

void check_run(Communicator& comm, const TrainConfig& cfg) {
  comm.agree(check_config(cfg));
  agree_settings(comm, cfg);
  if (comm.size() % cfg.shard_group_size != 0) {
    comm.agree(fmt::format(
        "--shard-group-size {} does not divide the {} ranks (a worker is a group of that many "
        "consecutive ranks)",
        cfg.shard_group_size, comm.size()));
  }
  if (!cfg.cpu_cost.empty()) set_cpu_table(comm, cfg.cpu_cost);
  const int workers = comm.size() / cfg.shard_group_size;
  if (const auto& c = parse_faults(cfg.inject_fault).corrupt; c && c->rank >= workers) {
    comm.agree(fmt::format("--inject-fault {}: worker {} does not exist (this run has {} workers)",
                           cfg.inject_fault, c->rank, workers));
  }
  if (const int r = parse_faults(cfg.inject_fault).largest_rank(); r >= comm.size()) {
    comm.agree(fmt::format("--inject-fault {}: rank {} does not exist (this run has {} ranks)",
                           cfg.inject_fault, r, comm.size()));
  }
}

sync::SchemeOptions sync_options(const TrainConfig& config) {
  sync::SchemeOptions options;
  options.threads = config.sync_threads;
  return options;
}

double learning_rate(const TrainConfig& c, double peak, int step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) return peak * step / c.warmup_steps;
  const double span = std::max(1, c.steps - c.warmup_steps);
  const double progress = std::min(1.0, (step - c.warmup_steps) / span);
  return peak * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress)));
}

std::uint64_t vocabulary_fingerprint(const Vocabulary& vocab) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t id = 0; id < vocab.size(); ++id) {
    const std::string line = vocab.word(static_cast<std::uint32_t>(id)) + "\n";
    h = util::fnv1a({reinterpret_cast<const std::uint8_t*>(line.data()), line.size()}, h);
  }
  return h;
}

}  // namespace atl::train
