// build/atoll: the command-line front end. The same file builds build/atoll-smpi for smpirun.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

// smpi_helpers.h (force-included in the SMPI build) defines exit() as a macro, which clashes with
// CLI11's App::exit; keep it out of CLI11's way.
#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")

#include "atoll/cli/commands.h"
#include "atoll/comm/communicator.h"
#include "atoll/comm/watchdog.h"
#ifdef ATOLL_SMPI
#include "atoll/comm/smpi_testbed_models.h"
#endif
#include "atoll/sync/scheme.h"
#include "atoll/train/trainer.h"
#include "atoll/util/allocator.h"

namespace {

// --nonfinite fail: a gradient held a NaN or an infinity (distinct from usage errors' 2 and the
// watchdog's 86).
constexpr int kNonFiniteExit = 3;

void add_generator_flags(CLI::App* cmd, atl::sparse::GeneratorOptions& g, std::string& values) {
  cmd->add_option("--elements", g.elements, "element count M of the gradient");
  cmd->add_option("--density", g.density, "share of non-zero elements per worker, in [0, 1]");
  cmd->add_option("--zipf", g.zipf_exponent, "Zipf exponent of index popularity (0 = uniform)");
  cmd->add_option("--seed", g.seed, "generator seed (each rank derives its own stream)");
  cmd->add_option("--values", values, "value distribution: normal | integer (exact sums)")
      ->check(CLI::IsMember({"normal", "integer"}));
}

// Config files for `atoll train --config`: JSON (an object of option names) or CLI11's TOML/INI
// (keys at the top level or under [train]); detected by the first character. Keys are the option
// names with '_' or '-' alike; an unknown key is an error naming it, never silently ignored.
// Flags on the command line override the file.
class JsonOrTomlConfig : public CLI::ConfigTOML {
 public:
  explicit JsonOrTomlConfig(const CLI::App* train) : train_(train) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    auto items = parse(in);
    for (auto& item : items) {
      if (item.name == "++" || item.name == "--") continue;  // TOML section markers
      std::replace(item.name.begin(), item.name.end(), '_', '-');
      const auto key = item.fullname();
      if (item.parents != std::vector<std::string>{"train"}) {
        throw CLI::ConfigError(fmt::format(
            "config file: unknown section or key '{}' (keys are atoll train's options, at the "
            "top level or under [train])",
            key));
      }
      if (train_->get_option_no_throw("--" + item.name) == nullptr) {
        throw CLI::ConfigError(fmt::format(
            "config file: unknown key '{}' (not an option of atoll train; see atoll train --help)",
            item.name));
      }
    }
    return items;
  }

 private:
  std::vector<CLI::ConfigItem> parse(std::istream& in) const {
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || text[first] != '{') {
      std::istringstream toml(text);
      auto items = CLI::ConfigTOML::from_config(toml);
      for (auto& item : items) {
        if (item.parents.empty() && item.name != "train") item.parents = {"train"};
      }
      return items;
    }
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      throw CLI::ConversionError("config file: not valid JSON (expected one object)");
    }
    std::vector<CLI::ConfigItem> items;
    for (const auto& [key, value] : j.items()) {
      CLI::ConfigItem item;
      item.parents = {"train"};
      item.name = key;
      auto scalar = [](const nlohmann::json& v) {
        if (v.is_string()) return v.get<std::string>();
        if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
        return v.dump();
      };
      if (value.is_array()) {
        for (const auto& v : value) item.inputs.push_back(scalar(v));
      } else if (value.is_object() || value.is_null()) {
        throw CLI::ConversionError("config file: value of '" + key + "' must be a scalar or list");
      } else {
        item.inputs.push_back(scalar(value));
      }
      items.push_back(std::move(item));
    }
    return items;
  }

  const CLI::App* train_;
};

// Unsigned options: CLI11 reads "-5" as 2^64 - 5. Refuse a sign instead, on every such option.
void refuse_negative_unsigned(CLI::App* app) {
  const CLI::Validator no_sign(
      [](std::string& v) -> std::string {
        const auto first = v.find_first_not_of(" \t");
        return first != std::string::npos && (v[first] == '-' || v[first] == '+')
                   ? "must be a whole number >= 0 (got '" + v + "')"
                   : "";
      },
      "");
  for (auto* opt : app->get_options()) {
    if (opt->get_type_name().rfind("UINT", 0) == 0) opt->check(no_sign);
  }
  for (auto* sub : app->get_subcommands({})) refuse_negative_unsigned(sub);
}

}  // namespace

int main(int argc, char** argv) {
  atl::util::keep_freed_memory();  // see allocator.h
  CLI::App app{"atoll: communication-efficient distributed training"};
  app.require_subcommand(1);

  atl::cli::BenchSyncOptions bench;
  std::string bench_values = "normal";
  std::string schemes = "all";
  auto* bench_cmd = app.add_subcommand("bench", "benchmarks");
  bench_cmd->require_subcommand(1);
  auto* sync_cmd = bench_cmd->add_subcommand(
      "sync", "verify and time the synchronization schemes (run under mpirun or scripts/simulate)");
  sync_cmd->add_option("--schemes", schemes,
                       "comma-separated schemes or 'all': allreduce, agsparse, sparcml, "
                       "omnireduce, sparse_ps, zen_coo, zen, zen_ef, auto");
  add_generator_flags(sync_cmd, bench.generator, bench_values);
  sync_cmd->add_option("--index-bits", bench.index_bits, "index width: 32 or 64");
  sync_cmd->add_option("--repeat", bench.repeat, "timed repetitions (median reported)");
  sync_cmd->add_option("--warmup", bench.warmup, "untimed repetitions first");
  sync_cmd->add_option("--trace", bench.trace_dir, "read gradients from this trace directory");
  sync_cmd->add_option("--step", bench.trace_step, "trace step to use (default: the first)");
  sync_cmd->add_option("--dump-trace", bench.dump_trace_dir,
                       "write each rank's gradient to this directory as a trace (step 0)");
  sync_cmd->add_flag("--verify", bench.verify, "check every result against the dense reference");
  sync_cmd->add_flag("--json", bench.json, "one JSON object per scheme per line");
  sync_cmd->add_flag("--breakdown", bench.breakdown,
                     "each phase's time beside the network-only time of its bytes (alpha-beta "
                     "probed on the links) and the total against that bound");
  sync_cmd->add_option("--inject-fault", bench.inject_fault,
                       "experiments: kill:RANK:PHASE:STEP or stop:RANK:PHASE:STEP makes RANK "
                       "raise SIGKILL or SIGSTOP at a scheme's PHASE (push, aggregate, pull, ...) "
                       "of timed repetition STEP");
  sync_cmd->add_option("--cpu-cost", bench.cpu_cost_file,
                       "simulation: charge the schemes' computation from this cpu cost table "
                       "(scripts/calibrate-cpu) instead of measuring it, so runs repeat exactly");
  sync_cmd
      ->add_option("--row-width", bench.row_width,
                   "the gradient as rows of W values (an embedding's rows: Zen sends one "
                   "index per row); M must be a multiple of W")
      ->check(CLI::PositiveNumber);
  sync_cmd->add_flag("--row-views", bench.row_views,
                     "with --row-width: Zen's variants leave the summed rows in the blocks they "
                     "were pulled in (no copy into the result), as the trainer has them");
  sync_cmd->add_option("--threads", bench.threads,
                       "worker threads per rank for Zen's decode (default: the node's cores "
                       "shared by the ranks on it; 1 under simulation); at most the machine's "
                       "cores, and under simulation each simulated host is taken to have them");
  sync_cmd
      ->add_option("--pull-chunks", bench.zen_pull_chunks,
                   "Zen's pull in at most this many pipelined chunks (default 8): each is one "
                   "collective of n - 1 messages per rank")
      ->check(CLI::Range(1, 64));
  sync_cmd->add_option("--pull-min-block", bench.zen_pull_min_block,
                       "fewer pull chunks where a server's average block would be under this "
                       "many bytes (default 32768; 0: always --pull-chunks)");
  sync_cmd->add_option("--zen-group", bench.zen_group,
                       "Zen's push and pull in two steps, between groups of G consecutive ranks "
                       "(a node's) and within them: (G - 1) + (n/G - 1) messages per rank "
                       "instead of n - 1, the push summed within the group, each pulled block "
                       "taken off the network once per group; G must divide the ranks; 0 "
                       "(default): the ranks per node on several nodes of as many consecutive "
                       "ranks, else flat (so under simulation); 1: flat");
  sync_cmd->add_flag_callback(
      "--zen-group-pull-only", [&bench] { bench.zen_group_push = false; },
      "with --zen-group: the pull alone in two steps, the push flat (one exchange with every "
      "rank)");
  sync_cmd->add_option("--cpu-cost-record", bench.cpu_cost_record,
                       "measure the schemes' computation per operation in the timed calls and "
                       "merge it into this cpu cost table (created if absent), refitted");

  atl::cli::AnalyzeOptions an;
  std::string analyze_values = "normal";
  auto* analyze_cmd = app.add_subcommand(
      "analyze", "density, overlap, densification and skew of a trace or a synthetic setup");
  analyze_cmd->add_option("--trace", an.trace_dir, "trace directory (all ranks of one step)");
  analyze_cmd->add_option("--step", an.trace_step, "trace step (default: the first)");
  analyze_cmd->add_option("--ranks", an.ranks, "synthetic: number of workers");
  add_generator_flags(analyze_cmd, an.generator, analyze_values);
  analyze_cmd->add_flag("--json", an.json, "print one JSON object");

  atl::cli::PlanCommandOptions plan_options;
  // A flag whose absence means "not given" (std::optional), so that every given value is checked.
  auto optional_option = [](CLI::App* cmd, const std::string& name, auto& target,
                            const std::string& help) {
    using Value = typename std::decay_t<decltype(target)>::value_type;
    return cmd->add_option_function<Value>(
        name, [&target](const Value& v) { target = v; }, help);
  };
  auto* plan_cmd = app.add_subcommand(
      "plan", "rotating-clique synchronization schedule across WAN sites (multicast + FPGA)");
  plan_cmd->add_option("--topology", plan_options.topology_file,
                       "sites CSV (default: the nine cities in data/cities-9.csv)");
  plan_cmd->add_option("--latency-matrix", plan_options.latency_matrix_file,
                       "measured one-way latencies, CSV in ms");
  plan_cmd->add_option("--latency-model", plan_options.latency_model,
                       "fiber (dedicated links, default) or affine (fitted to public pings)");
  plan_cmd->add_option("--latency-samples", plan_options.latency_samples_file,
                       "affine: city-pair pings CSV to fit (default: data/pings-2011.csv)");
  optional_option(plan_cmd, "--payload", plan_options.payload_bytes,
                  "bytes each site sends per round (default 1e8)");
  optional_option(plan_cmd, "--fpga-memory", plan_options.fpga_memory_bytes,
                  "FPGA memory per site, bytes (default: the topology's)");
  optional_option(plan_cmd, "--egress-gbps", plan_options.egress_gbps, "WAN egress per site");
  optional_option(plan_cmd, "--ingress-gbps", plan_options.ingress_gbps, "WAN ingress per site");
  plan_cmd->add_option("--epsilon", plan_options.epsilon, "consensus target, in (0, 1)");
  plan_cmd->add_option("--compute-s", plan_options.compute_s,
                       "local compute between rounds, seconds (>= 0)");
  // --chunk-bytes: 0 would mean "the default", so an explicit 0 is refused here.
  const CLI::Validator positive_bytes(
      [](std::string& v) -> std::string {
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        return digits && v.find_first_not_of('0') != std::string::npos
                   ? ""
                   : "must be a positive whole number of bytes (got '" + v + "')";
      },
      "BYTES");
  plan_cmd
      ->add_option("--chunk-bytes", plan_options.chunk_bytes,
                   "FPGA aggregation unit, bytes, for every clique (default: each multicast clique "
                   "its fastest)")
      ->check(positive_bytes);
  plan_cmd->add_option("--sweep", plan_options.sweep, "fpga-memory: best schedule per memory size");
  plan_cmd->add_flag("--json", plan_options.json, "one JSON object per schedule");
  plan_cmd->add_option("--schedule-out", plan_options.schedule_out,
                       "write the planned schedule to this file (docs/wan.md, schedule format)");

  // wan-sim: the SimGrid simulation of WAN schedules.
  atl::cli::WanSimOptions wan_sim_options;
  auto* wan_sim_cmd = app.add_subcommand(
      "wan-sim", "simulate WAN schedules in SimGrid; check the round model within a tolerance");
  {
    auto& w = wan_sim_options;
    auto* schedule = wan_sim_cmd->add_option(
        "--schedule", w.schedule_file, "schedule file to simulate (atoll plan --schedule-out)");
    auto* from_plan = wan_sim_cmd->add_flag(
        "--from-plan", w.from_plan, "plan, then simulate every schedule the planner reports");
    schedule->excludes(from_plan);
    wan_sim_cmd->add_option("--topology", w.plan.topology_file,
                            "sites CSV (default: data/cities-9.csv)");
    wan_sim_cmd->add_option("--latency-matrix", w.plan.latency_matrix_file,
                            "measured one-way latencies, CSV in ms");
    wan_sim_cmd->add_option("--latency-model", w.plan.latency_model,
                            "fiber (dedicated links, default) or affine (fitted to public pings)");
    wan_sim_cmd->add_option("--latency-samples", w.plan.latency_samples_file,
                            "affine: city-pair pings CSV to fit (default: data/pings-2011.csv)");
    optional_option(wan_sim_cmd, "--rounds", w.rounds,
                    "rounds to simulate (default: rounds to consensus, else one period)");
    optional_option(wan_sim_cmd, "--payload", w.plan.payload_bytes,
                    "bytes each site sends per round (default: the schedule's, or 1e8)");
    optional_option(wan_sim_cmd, "--fpga-memory", w.plan.fpga_memory_bytes,
                    "FPGA memory per site, bytes (default: the topology's)");
    optional_option(wan_sim_cmd, "--egress-gbps", w.plan.egress_gbps, "WAN egress per site");
    optional_option(wan_sim_cmd, "--ingress-gbps", w.plan.ingress_gbps, "WAN ingress per site");
    wan_sim_cmd
        ->add_option("--chunk-bytes", w.plan.chunk_bytes,
                     "FPGA aggregation unit, bytes, for every clique (default: each multicast "
                     "clique its fastest)")
        ->check(positive_bytes);
    wan_sim_cmd->add_option("--epsilon", w.plan.epsilon, "consensus target (with --from-plan)");
    wan_sim_cmd->add_option("--compute-s", w.plan.compute_s,
                            "local compute between rounds, seconds (>= 0)");
    wan_sim_cmd->add_option("--tolerance", w.tolerance,
                            "largest allowed |simulated/model - 1| per round (default 0.1)");
    wan_sim_cmd->add_flag("--no-throttle", w.no_throttle,
                          "multicast senders ignore FPGA memory (shows the overflow)");
    wan_sim_cmd->add_flag("--flow-level-unicast", w.flow_level_unicast,
                          "one SimGrid flow per unicast pair instead of fair chunk streams");
    wan_sim_cmd->add_flag("--json", w.plan.json, "one JSON object per schedule, then a summary");
  }

  // wan-platform: a SimGrid platform across WAN sites for scripts/simulate.
  atl::cli::WanPlatformOptions wan_platform_options;
  auto* wan_platform_cmd = app.add_subcommand(
      "wan-platform", "write a SimGrid platform: one host per WAN site, the topology's latencies");
  {
    auto& w = wan_platform_options;
    wan_platform_cmd->add_option("--topology", w.topology_file,
                                 "sites CSV (default: data/cities-9.csv)");
    wan_platform_cmd->add_option("--latency-matrix", w.latency_matrix_file,
                                 "measured one-way latencies, CSV in ms");
    wan_platform_cmd->add_option("--sites", w.sites,
                                 "N (the first N sites in file order) or CODES,... (default: all)");
    wan_platform_cmd->add_option("--bandwidth", w.bandwidth, "each site's access link, e.g. 1Gbps")
        ->required();
    wan_platform_cmd->add_option("--name", w.name, "platform (zone) id (default: --out's stem)");
    wan_platform_cmd->add_option(
        "--node-cores", w.node_cores,
        "cores per site's host, for that many ranks per site (scripts/simulate --ranks-per-host; "
        "default 1)");
    optional_option(wan_platform_cmd, "--smpi-cfg", w.smpi_cfg,
                    "SMPI settings scripts/simulate applies, 'KEY:VALUE ...' (default: the "
                    "measured WAN collectives; '' for none)");
    wan_platform_cmd->add_option("--out", w.out, "write here (default: standard output)");
  }

  // atoll train: every option starts from the tiny preset; --preset small replaces the model
  // shape, batch and steps unless they are given explicitly (by flag or config file).
  atl::train::TrainConfig tc = atl::train::preset_config("tiny");
  std::vector<std::pair<CLI::Option*, std::function<void(const atl::train::TrainConfig&)>>>
      preset_fields;
  auto* train_cmd = app.add_subcommand(
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
  auto* sync_every = train_cmd->add_option("--sync-every", tc.sync_every,
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

  // The collective watchdog (atoll/comm/watchdog.h) of bench sync and train.
  double comm_timeout = atl::comm::kDefaultCommTimeout;
  for (auto* cmd : {sync_cmd, train_cmd}) {
    cmd->add_option("--comm-timeout", comm_timeout,
                    "abort the job when one communicator operation takes longer than this many "
                    "seconds: a peer stopped, dead or unreachable (0: off; off under SMPI)");
  }

  refuse_negative_unsigned(&app);
  try {
    app.parse(argc, argv);
    if (!(comm_timeout >= 0) || !std::isfinite(comm_timeout)) {
      throw CLI::ValidationError(
          fmt::format("--comm-timeout {} must be a number of seconds >= 0 (0: off)", comm_timeout));
    }
    if (train_cmd->parsed() && tc.preset != "tiny") {
      const auto p = atl::train::preset_config(tc.preset);
      for (auto& [opt, copy] : preset_fields) {
        if (opt->count() == 0) copy(p);
      }
    }
    // A flag the strategy would ignore (its default cannot be told from a value given).
    if (train_cmd->parsed() && sync_every->count() > 0 && tc.strategy != "diloco" &&
        tc.strategy != "edit") {
      throw CLI::ValidationError(fmt::format(
          "--sync-every applies to --strategy diloco or edit (this run has --strategy {}{})",
          tc.strategy, tc.strategy == "aedit" ? ": its rounds are timed by --sync-seconds" : ""));
    }
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return (app.exit)(e);  // --help
    // Before MPI starts: name the launcher's rank so a user sees that every rank refused.
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", r ? r : "0", e.what());
    return 2;  // a usage error, as the checks after MPI starts return (not CLI11's own codes)
  } catch (const std::exception& e) {  // e.g. an unknown preset
    std::cerr << fmt::format("atoll: error: {}\n", e.what());
    return 2;
  }

  atl::comm::MpiRuntime runtime(&argc, &argv);
  auto comm = atl::comm::Communicator::world();
  try {
#ifdef ATOLL_SMPI
    try {  // every rank checks the same platform, so every rank refuses alike
      atl::comm::install_testbed_models(comm.rank(), comm.size());
    } catch (const std::invalid_argument& e) {
      throw atl::cli::UsageError(e.what());
    }
    comm.barrier();  // rank 0 installs the models before any rank computes
#endif
    if (sync_cmd->parsed() || train_cmd->parsed()) atl::comm::set_comm_timeout(comm_timeout);
    if (sync_cmd->parsed()) {
      bench.schemes.clear();
      std::string item;
      for (char ch : schemes + ",") {
        if (ch == ',') {
          if (!item.empty()) bench.schemes.push_back(item);
          item.clear();
        } else if (ch != ' ') {
          item += ch;
        }
      }
      bench.generator.values = bench_values == "integer" ? atl::sparse::ValueKind::integer
                                                         : atl::sparse::ValueKind::normal;
      return atl::cli::bench_sync(comm, bench);
    }
    if (plan_cmd->parsed()) return atl::cli::plan(comm, plan_options);
    if (train_cmd->parsed()) return atl::train::train(comm, tc);
    if (wan_sim_cmd->parsed()) return atl::cli::wan_sim(comm, wan_sim_options);
    if (wan_platform_cmd->parsed()) return atl::cli::wan_platform(comm, wan_platform_options);
    if (analyze_cmd->parsed()) {
      an.generator.values = analyze_values == "integer" ? atl::sparse::ValueKind::integer
                                                        : atl::sparse::ValueKind::normal;
      return atl::cli::analyze(comm, an);
    }
  } catch (const atl::cli::UsageError& e) {
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", comm.rank(), e.what());
    return 2;
  } catch (const atl::train::NonFiniteGradientError& e) {  // --nonfinite fail
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", comm.rank(), e.what());
    if (!e.agreed()) atl::comm::MpiRuntime::abort_job(kNonFiniteExit);
    return kNonFiniteExit;
  } catch (const atl::comm::CollectiveError& e) {
    std::cerr << fmt::format("atoll: error (rank {} reporting): {}\n", comm.rank(), e.what());
    return 2;
  } catch (const std::exception& e) {
    // Not agreed across ranks: this rank cannot know whether its peers will reach the next
    // collective, so end the whole job rather than leave them waiting.
    std::cerr << fmt::format("atoll: fatal: rank {}: {}\n", comm.rank(), e.what());
    atl::comm::MpiRuntime::abort_job(1);
  }
  return 0;
}
