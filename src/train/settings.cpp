#include "settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "atoll/comm/cpu_costs.h"
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
                            {"pseudo-topk-decay", c.pseudo_topk_decay},
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
// they share the world's mode). A bad file fails every rank; rank 0 names the operations this run
// can charge that the table has no samples of (charged 0).
void set_cpu_table(Communicator& comm, const TrainConfig& cfg) {
  const auto& file = cfg.cpu_cost;
  auto charging = std::make_shared<comm::CpuCharging>();
  std::optional<std::string> problem;
  try {
    charging->table = comm::CpuCostTable::load(file);
    charging->mode = comm::CpuCharging::Mode::table;
  } catch (const std::exception& e) {
    problem = fmt::format("--cpu-cost {}: {}", file, e.what());
  }
  comm.agree(problem);
  // The embedding's scheme and the compared ones, on the embedding's rows unless
  // --embedding-rows false.
  auto schemes = cfg.compare_schemes;
  schemes.push_back(cfg.sync);
  const auto zero = charging->table.unmeasured(schemes, cfg.embedding_rows);
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
  if (!cfg.cpu_cost.empty()) set_cpu_table(comm, cfg);
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
