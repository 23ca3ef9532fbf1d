// build/atoll: the command-line front end. The same file builds build/atoll-smpi for smpirun.
#include <fmt/format.h>

#include <iostream>

// smpi_helpers.h (force-included in the SMPI build) defines exit() as a macro, which clashes with
// CLI11's App::exit; keep it out of CLI11's way.
#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")

#include "atoll/cli/commands.h"
#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "atoll/util/allocator.h"

namespace {

void add_generator_flags(CLI::App* cmd, atl::sparse::GeneratorOptions& g, std::string& values) {
  cmd->add_option("--elements", g.elements, "element count M of the gradient");
  cmd->add_option("--density", g.density, "share of non-zero elements per worker, in [0, 1]");
  cmd->add_option("--zipf", g.zipf_exponent, "Zipf exponent of index popularity (0 = uniform)");
  cmd->add_option("--seed", g.seed, "generator seed (each rank derives its own stream)");
  cmd->add_option("--values", values, "value distribution: normal | integer (exact sums)")
      ->check(CLI::IsMember({"normal", "integer"}));
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
                       "omnireduce, sparse_ps, zen_coo, zen, auto");
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
  auto* plan_cmd = app.add_subcommand(
      "plan", "rotating-clique synchronization schedule across WAN sites (multicast + FPGA)");
  plan_cmd->add_option("--topology", plan_options.topology_file,
                       "sites CSV (default: the nine cities in data/cities-9.csv)");
  plan_cmd->add_option("--latency-matrix", plan_options.latency_matrix_file,
                       "measured one-way latencies, CSV in ms");
  plan_cmd->add_option("--payload", plan_options.payload_bytes, "bytes each site sends per round");
  plan_cmd->add_option("--fpga-memory", plan_options.fpga_memory_bytes,
                       "FPGA memory per site, bytes");
  plan_cmd->add_option("--egress-gbps", plan_options.egress_gbps, "WAN egress per site");
  plan_cmd->add_option("--ingress-gbps", plan_options.ingress_gbps, "WAN ingress per site");
  plan_cmd->add_option("--epsilon", plan_options.epsilon, "consensus target, in (0, 1)");
  plan_cmd->add_option("--compute-s", plan_options.compute_s, "local compute between rounds");
  plan_cmd->add_option("--sweep", plan_options.sweep, "fpga-memory: best schedule per memory size");
  plan_cmd->add_flag("--json", plan_options.json, "one JSON object per schedule");
  plan_cmd->add_option("--schedule-out", plan_options.schedule_out,
                       "write the planned schedule to this file (docs/wan.md, schedule format)");

  // wan-sim: the SimGrid simulation of WAN schedules.
  atl::cli::WanSimOptions wan_sim_options;
  wan_sim_options.plan.payload_bytes = -1;  // the schedule file's unless given
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
    wan_sim_cmd->add_option("--rounds", w.rounds,
                            "rounds to simulate (default: rounds to consensus, else one period)");
    wan_sim_cmd->add_option("--payload", w.plan.payload_bytes,
                            "bytes each site sends per round (default: the schedule's, or 1e8)");
    wan_sim_cmd->add_option("--fpga-memory", w.plan.fpga_memory_bytes,
                            "FPGA memory per site, bytes");
    wan_sim_cmd->add_option("--egress-gbps", w.plan.egress_gbps, "WAN egress per site");
    wan_sim_cmd->add_option("--ingress-gbps", w.plan.ingress_gbps, "WAN ingress per site");
    wan_sim_cmd->add_option("--chunk-bytes", w.chunk_bytes, "FPGA aggregation unit, bytes");
    wan_sim_cmd->add_option("--epsilon", w.plan.epsilon, "consensus target (with --from-plan)");
    wan_sim_cmd->add_option("--compute-s", w.plan.compute_s, "local compute between rounds");
    wan_sim_cmd->add_option("--tolerance", w.tolerance,
                            "largest allowed |simulated/model - 1| per round (default 0.1)");
    wan_sim_cmd->add_flag("--no-throttle", w.no_throttle,
                          "multicast senders ignore FPGA memory (shows the overflow)");
    wan_sim_cmd->add_flag("--flow-level-unicast", w.flow_level_unicast,
                          "one SimGrid flow per unicast pair instead of fair chunk streams");
    wan_sim_cmd->add_flag("--json", w.plan.json, "one JSON object per schedule, then a summary");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return (app.exit)(e);
  }

  atl::comm::MpiRuntime runtime(&argc, &argv);
  auto comm = atl::comm::Communicator::world();
  try {
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
    if (wan_sim_cmd->parsed()) return atl::cli::wan_sim(comm, wan_sim_options);  // wan-sim
    if (analyze_cmd->parsed()) {
      an.generator.values = analyze_values == "integer" ? atl::sparse::ValueKind::integer
                                                        : atl::sparse::ValueKind::normal;
      return atl::cli::analyze(comm, an);
    }
  } catch (const atl::cli::UsageError& e) {
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", comm.rank(), e.what());
    return 2;
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
