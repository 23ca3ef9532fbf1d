// `atoll plan`: the rotating-clique schedule that reaches ε-consensus soonest across the sites,
// with its figures and the baselines'; `--sweep fpga-memory` shows how the best shape changes with
// FPGA memory. Runs on rank 0; other ranks of an mpirun job wait.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "atoll/cli/commands.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/schedule_file.h"
#include "wan_common.h"

namespace atl::cli {

void check_plan_flags(const PlanCommandOptions& o) {
  const auto positive = [](const char* flag, const std::optional<double>& v) {
    if (v && !(*v > 0 && std::isfinite(*v)))
      throw UsageError(fmt::format("{} must be a positive number (got {})", flag, *v));
  };
  positive("--payload", o.payload_bytes);
  positive("--fpga-memory", o.fpga_memory_bytes);
  positive("--egress-gbps", o.egress_gbps);
  positive("--ingress-gbps", o.ingress_gbps);
  if (!(o.epsilon > 0 && o.epsilon < 1)) {
    throw UsageError(fmt::format(
        "--epsilon must be in (0, 1) (got {}): consensus error starts at 1", o.epsilon));
  }
  if (!(o.compute_s >= 0 && std::isfinite(o.compute_s))) {
    throw UsageError(fmt::format(
        "--compute-s must be a time >= 0 in seconds (got {}): it is added to every round",
        o.compute_s));
  }
}

wan::TopologyOptions topology_options(const PlanCommandOptions& o,
                                      std::optional<double> fpga_memory_bytes) {
  wan::TopologyOptions t;
  t.topology_file = o.topology_file;
  t.latency_matrix_file = o.latency_matrix_file;
  try {
    t.latency_model = wan::parse_latency_model(o.latency_model);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--latency-model: {}", e.what()));
  }
  t.latency_samples_file = o.latency_samples_file;
  t.fpga_memory_bytes = fpga_memory_bytes;
  if (o.egress_gbps) t.egress_bytes_per_s = *o.egress_gbps * 1e9 / 8;
  if (o.ingress_gbps) t.ingress_bytes_per_s = *o.ingress_gbps * 1e9 / 8;
  return t;
}

wan::PlanRequest plan_request(const PlanCommandOptions& o, double payload_bytes) {
  return {.payload_bytes = payload_bytes,
          .chunk_bytes = o.chunk_bytes,
          .compute_s = o.compute_s,
          .epsilon = o.epsilon};
}

namespace {

std::string describe(const wan::Topology& t, const wan::Partition& round) {
  std::string s;
  for (const auto& c : round) {
    s += s.empty() ? "{" : "  {";
    for (std::size_t k = 0; k < c.size(); ++k) s += (k ? " " : "") + t.site(c[k]).name;
    s += "}";
  }
  return s;
}

// Which latency model the figures use; for the affine model, its fit (docs/wan.md).
std::string latency_line(const PlanCommandOptions& o) {
  if (!o.latency_matrix_file.empty())
    return fmt::format("  latencies: measured matrix {}", o.latency_matrix_file);
  if (wan::parse_latency_model(o.latency_model) == wan::LatencyModelKind::fiber)
    return "  latencies: fiber model (great circle x 1.2 within a continent, x 1.5 across, at "
           "204,000 km/s)";
  const auto fit = wan::fit_affine_latency(wan::load_latency_samples_csv(
      o.latency_samples_file.empty() ? wan::default_latency_samples_file()
                                     : std::filesystem::path(o.latency_samples_file)));
  const auto describe = [](const char* name, const wan::AffineClassFit& c) {
    return fmt::format(
        "{} {:.2f} ms + {:.3f} ms/1000 km (R^2 {:.3f}, rms {:.2f} ms, {} samples, "
        "{} outliers)",
        name, c.line.fixed_s * 1e3, c.line.per_km_s * 1e6, c.r_squared, c.rms_residual_s * 1e3,
        c.samples, c.outliers.size());
  };
  return fmt::format("  latencies: affine fit, one way: {}; {}",
                     describe("same continent", fit.same_continent),
                     describe("across", fit.cross_continent));
}

// The time column of a schedule: infeasible (a clique cannot run at this memory) and never
// (no consensus) are words, not numbers.
std::string time_cell(const wan::EvaluatedSchedule& e) {
  if (!e.feasible) return "infeasible";
  if (!e.rounds) return "never";
  return fmt::format("{:.4f}", e.time_to_consensus_s);
}

// Per round, per group: the multicast cliques' aggregation units (null for other groups).
nlohmann::json chunk_bytes_json(const wan::Topology& t, const wan::EvaluatedSchedule& e,
                                const wan::RoundOptions& round) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : e.resolved) {
    nlohmann::json units = nlohmann::json::array();
    for (const auto& x : r) {
      units.push_back(
          x.kind == wan::ExchangeKind::multicast_fpga
              ? nlohmann::json(
                    wan::clique_cost(t, x.sites, wan::Transport::multicast_fpga, round).chunk_bytes)
              : nlohmann::json());
    }
    out.push_back(units);
  }
  return out;
}

nlohmann::json to_json(const wan::Topology& t, const wan::EvaluatedSchedule& e,
                       std::optional<double> lower_bound_s, const wan::RoundOptions& round) {
  double mean = 0;
  for (double r : e.round_times_s) mean += r;
  mean /= static_cast<double>(e.round_times_s.size());
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& r : e.schedule) {
    nlohmann::json cliques = nlohmann::json::array();
    for (const auto& c : r) {
      nlohmann::json names = nlohmann::json::array();
      for (auto s : c) names.push_back(t.site(s).code);
      cliques.push_back(names);
    }
    rounds.push_back(cliques);
  }
  const char* transport = e.transport == wan::Transport::unicast          ? "unicast"
                          : e.transport == wan::Transport::multicast_fpga ? "multicast_fpga"
                                                                          : "best";
  nlohmann::json round_times = nlohmann::json::array();
  for (double r : e.round_times_s)
    round_times.push_back(std::isfinite(r) ? nlohmann::json(r) : nlohmann::json());
  return {{"name", e.name},
          {"transport", transport},
          {"feasible", e.feasible},
          {"chunk_bytes", chunk_bytes_json(t, e, round)},
          {"max_clique_size", e.max_clique_size},
          {"rounds_per_period", e.schedule.size()},
          {"round_time_s", std::isfinite(mean) ? nlohmann::json(mean) : nlohmann::json()},
          {"round_times_s", round_times},
          {"rho", e.rho},
          {"rounds_to_consensus", e.rounds ? nlohmann::json(*e.rounds) : nlohmann::json()},
          {"time_to_consensus_s", std::isfinite(e.time_to_consensus_s)
                                      ? nlohmann::json(e.time_to_consensus_s)
                                      : nlohmann::json()},
          {"schedule", rounds},
          {"lower_bound_s", lower_bound_s ? nlohmann::json(*lower_bound_s) : nlohmann::json()}};
}

}  // namespace

int plan(comm::Communicator& comm, const PlanCommandOptions& o) {
  std::optional<std::string> problem;
  std::vector<std::string> lines;
  if (comm.rank() == 0) {
    try {
      check_plan_flags(o);
      const double payload = o.payload_bytes.value_or(kDefaultPayloadBytes);
      if (!o.sweep.empty() && o.sweep != "fpga-memory") {
        throw UsageError(fmt::format("--sweep takes 'fpga-memory' (got '{}')", o.sweep));
      }
      if (!o.sweep.empty() && !o.schedule_out.empty())
        throw UsageError("--schedule-out writes one schedule: not with --sweep");
      if (o.sweep.empty()) {
        const auto t = wan::load_topology(topology_options(o, o.fpga_memory_bytes));
        const auto po = wan::plan_options(t, plan_request(o, payload));
        const auto best = wan::best_plan(t, po);
        const auto bound = wan::consensus_time_lower_bound(t, po.round, o.epsilon);
        auto all = wan::baselines(t, po);
        all.insert(all.begin(), best);
        if (!o.schedule_out.empty()) {
          wan::write_schedule_file(o.schedule_out, wan::to_schedule_file(t, best, payload));
        }
        const auto hierarchical_skipped = wan::hierarchical_not_applicable(t);
        if (o.json) {
          for (const auto& e : all) {
            auto j = to_json(t, e, bound, po.round);
            j["latency_model"] = o.latency_matrix_file.empty() ? o.latency_model : "matrix";
            lines.push_back(j.dump());
          }
          if (hierarchical_skipped) {
            lines.push_back(
                nlohmann::json{{"name", "hierarchical"}, {"not_applicable", *hierarchical_skipped}}
                    .dump());
          }
        } else {
          lines.push_back(fmt::format(
              "planned schedule ({} sites, payload {:.3g} B, epsilon {:g}, aggregation unit {}):",
              t.size(), payload, o.epsilon,
              o.chunk_bytes ? fmt::format("{} B", o.chunk_bytes) : std::string("per clique")));
          lines.push_back(latency_line(o));
          for (std::size_t r = 0; r < best.schedule.size(); ++r) {
            lines.push_back(fmt::format("  round {}: {:.4f} s  {}", r + 1, best.round_times_s[r],
                                        describe(t, best.schedule[r])));
          }
          lines.push_back(fmt::format("  rho {:.4g}, {} rounds to consensus, {:.4f} s", best.rho,
                                      best.rounds ? *best.rounds : 0, best.time_to_consensus_s));
          lines.push_back(fmt::format("{:<28} {:>10} {:>8} {:>8} {:>12}", "schedule", "max_clique",
                                      "rounds", "rho", "time_s"));
          for (const auto& e : all) {
            lines.push_back(
                fmt::format("{:<28} {:>10} {:>8} {:>8.3g} {:>12}", e.name, e.max_clique_size,
                            e.rounds ? std::to_string(*e.rounds) : "never", e.rho, time_cell(e)));
          }
          if (hierarchical_skipped) {
            lines.push_back(
                fmt::format("{:<28} not applicable: {}", "hierarchical", *hierarchical_skipped));
          }
          if (bound) {
            lines.push_back(fmt::format(
                "lower bound for any schedule: {:.4f} s (farthest site by the fastest chain + "
                "payload over ingress); no schedule can beat all-to-all unicast by more than "
                "{:.2f}x",
                *bound, all[1].time_to_consensus_s / *bound));
          }
        }
      } else {
        if (!o.json) {
          lines.push_back(fmt::format("{:>14} {:>10} {:>8} {:>12} {:>14} {:>14}", "fpga_memory_B",
                                      "max_clique", "rounds", "time_s", "vs_unicast_a2a",
                                      "bound_allows"));
        }
        for (double mem = 1e6; mem <= 64e9 * 1.01; mem *= 2) {
          const auto t = wan::load_topology(topology_options(o, mem));
          const auto po = wan::plan_options(t, plan_request(o, payload));
          const auto best = wan::best_plan(t, po);
          const auto base = wan::baselines(t, po);
          const auto bound = wan::consensus_time_lower_bound(t, po.round, o.epsilon);
          if (o.json) {
            auto j = to_json(t, best, bound, po.round);
            j["fpga_memory_bytes"] = mem;
            j["latency_model"] = o.latency_matrix_file.empty() ? o.latency_model : "matrix";
            lines.push_back(j.dump());
          } else {
            lines.push_back(fmt::format(
                "{:>14.4g} {:>10} {:>8} {:>12.4f} {:>13.2f}x {:>13.2f}x", mem, best.max_clique_size,
                best.rounds ? *best.rounds : 0, best.time_to_consensus_s,
                base[0].time_to_consensus_s / best.time_to_consensus_s,
                bound ? base[0].time_to_consensus_s / *bound : std::nan("")));
          }
        }
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  comm.agree(problem);
  for (const auto& l : lines) std::cout << l << "\n";
  std::cout.flush();
  return 0;
}

}  // namespace atl::cli
