// The options of `atoll plan`, `atoll wan-sim` (the SimGrid simulation of WAN schedules) and
// `atoll wan-platform` (a SimGrid platform across WAN sites for scripts/simulate) (options.h).
#include <string>
#include <type_traits>

#include "options.h"

namespace atl::cli {
namespace {

// A flag whose absence means "not given" (std::optional), so that every given value is checked.
const auto optional_option = [](CLI::App* cmd, const std::string& name, auto& target,
                                const std::string& help) {
  using Value = typename std::decay_t<decltype(target)>::value_type;
  return cmd->add_option_function<Value>(
      name, [&target](const Value& v) { target = v; }, help);
};

// --chunk-bytes: 0 would mean "the default", so an explicit 0 is refused here.
CLI::Validator positive_bytes() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        return digits && v.find_first_not_of('0') != std::string::npos
                   ? ""
                   : "must be a positive whole number of bytes (got '" + v + "')";
      },
      "BYTES");
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, PlanCommandOptions& plan) {
  auto* plan_cmd = app.add_subcommand(
      "plan", "rotating-clique synchronization schedule across WAN sites (multicast + FPGA)");
  plan_cmd->add_option("--topology", plan.topology_file,
                       "sites CSV (default: the nine cities in data/cities-9.csv)");
  plan_cmd->add_option("--latency-matrix", plan.latency_matrix_file,
                       "measured one-way latencies, CSV in ms");
  plan_cmd->add_option("--latency-model", plan.latency_model,
                       "fiber (dedicated links, default) or affine (fitted to public pings)");
  plan_cmd->add_option("--latency-samples", plan.latency_samples_file,
                       "affine: city-pair pings CSV to fit (default: data/pings-2011.csv)");
  optional_option(plan_cmd, "--payload", plan.payload_bytes,
                  "bytes each site sends per round (default 1e8)");
  optional_option(plan_cmd, "--fpga-memory", plan.fpga_memory_bytes,
                  "FPGA memory per site, bytes (default: the topology's)");
  optional_option(plan_cmd, "--egress-gbps", plan.egress_gbps, "WAN egress per site");
  optional_option(plan_cmd, "--ingress-gbps", plan.ingress_gbps, "WAN ingress per site");
  plan_cmd->add_option("--epsilon", plan.epsilon, "consensus target, in (0, 1)");
  plan_cmd->add_option("--compute-s", plan.compute_s,
                       "local compute between rounds, seconds (>= 0)");
  plan_cmd
      ->add_option("--chunk-bytes", plan.chunk_bytes,
                   "FPGA aggregation unit, bytes, for every clique (default: each multicast clique "
                   "its fastest)")
      ->check(positive_bytes());
  plan_cmd->add_option("--sweep", plan.sweep, "fpga-memory: best schedule per memory size");
  plan_cmd->add_flag("--json", plan.json, "one JSON object per schedule");
  plan_cmd->add_option("--schedule-out", plan.schedule_out,
                       "write the planned schedule to this file (docs/wan.md, schedule format)");
  return plan_cmd;
}

CLI::App* add_wan_sim_command(CLI::App& app, WanSimOptions& w) {
  auto* wan_sim_cmd = app.add_subcommand(
      "wan-sim", "simulate WAN schedules in SimGrid; check the round model within a tolerance");
  {
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
        ->check(positive_bytes());
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
  return wan_sim_cmd;
}

CLI::App* add_wan_platform_command(CLI::App& app, WanPlatformOptions& w) {
  auto* wan_platform_cmd = app.add_subcommand(
      "wan-platform", "write a SimGrid platform: one host per WAN site, the topology's latencies");
  {
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
  return wan_platform_cmd;
}

}  // namespace atl::cli
