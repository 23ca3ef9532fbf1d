// `atoll wan-sim`: runs a schedule (a schedule file, or every schedule the planner reports) in the
// SimGrid simulator (atoll/wan/simulator.h) and compares each round with the round model; fails
// when any round differs by more than the tolerance (10%) or an FPGA buffer exceeds its memory.
// With --from-plan it also reports the targets of issue 4 as simulated: the planned schedule's
// time to ε-consensus against all-to-all unicast (goal: 2x sooner) and the best baseline.
// Runs on rank 0; other ranks of an mpirun job wait.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "atoll/cli/commands.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/schedule_file.h"
#include "atoll/wan/simulator.h"
#include "wan_common.h"

namespace atl::cli {
namespace {

struct Candidate {
  std::string name;
  std::vector<wan::ResolvedRound> period;
  std::optional<std::size_t> rounds_to_consensus;
};

struct Compared {
  std::string name;
  std::size_t rounds = 0;
  std::vector<double> model_s, simulated_s;
  double model_total_s = 0, simulated_total_s = 0;
  double worst_deviation = 0;  // max over rounds of |simulated / model - 1|
  double peak_buffer_bytes = 0, overflow_bytes = 0, wall_s = 0;
  std::uint64_t messages = 0;
  bool reaches_consensus = false;
  std::size_t max_clique_size = 0;
  std::size_t multicast_groups = 0, unicast_groups = 0, ring_groups = 0;  // over one period
};

Compared compare(const wan::Topology& t, const Candidate& c, const wan::SimulationOptions& base,
                 std::optional<std::size_t> rounds_flag) {
  Compared out;
  out.name = c.name;
  out.reaches_consensus = c.rounds_to_consensus.has_value();
  out.rounds = rounds_flag ? *rounds_flag : c.rounds_to_consensus.value_or(c.period.size());
  for (std::size_t r = 0; r < out.rounds; ++r) {
    out.model_s.push_back(wan::round_time(t, c.period[r % c.period.size()], base.round));
    if (!std::isfinite(out.model_s.back())) {
      throw UsageError(fmt::format(
          "schedule '{}', round {}: a multicast clique does not fit the FPGA memory (the model "
          "gives no finite time)",
          c.name, r % c.period.size() + 1));
    }
  }
  for (const auto& round : c.period) {
    for (const auto& e : round) {
      out.max_clique_size = std::max(out.max_clique_size, e.sites.size());
      (e.kind == wan::ExchangeKind::multicast_fpga   ? out.multicast_groups
       : e.kind == wan::ExchangeKind::ring_allreduce ? out.ring_groups
                                                     : out.unicast_groups)++;
    }
  }
  auto o = base;
  o.rounds = out.rounds;
  const auto sim = wan::simulate(t, c.period, o);
  for (std::size_t r = 0; r < out.rounds; ++r) {
    const double s = sim.rounds[r].time_s;
    out.simulated_s.push_back(s);
    out.model_total_s += out.model_s[r];
    out.simulated_total_s += s;
    out.worst_deviation = std::max(out.worst_deviation, std::abs(s / out.model_s[r] - 1));
    for (double b : sim.rounds[r].peak_buffer_bytes)
      out.peak_buffer_bytes = std::max(out.peak_buffer_bytes, b);
    out.overflow_bytes = std::max(out.overflow_bytes, sim.rounds[r].overflow_bytes);
  }
  out.wall_s = sim.wall_s;
  out.messages = sim.messages;
  return out;
}

nlohmann::json to_json(const Compared& c, double memory, double payload) {
  return {{"name", c.name},
          {"fpga_memory_bytes", memory},
          {"payload_bytes", payload},
          {"rounds_simulated", c.rounds},
          {"max_clique_size", c.max_clique_size},
          {"multicast_groups_per_period", c.multicast_groups},
          {"unicast_groups_per_period", c.unicast_groups},
          {"ring_groups_per_period", c.ring_groups},
          {"reaches_consensus", c.reaches_consensus},
          {"model_round_times_s", c.model_s},
          {"simulated_round_times_s", c.simulated_s},
          {"model_time_s", c.model_total_s},
          {"simulated_time_s", c.simulated_total_s},
          {"worst_deviation", c.worst_deviation},
          {"peak_buffer_bytes", c.peak_buffer_bytes},
          {"overflow_bytes", c.overflow_bytes},
          {"messages", c.messages},
          {"wall_s", c.wall_s}};
}

}  // namespace

int wan_sim(comm::Communicator& comm, const WanSimOptions& o) {
  std::optional<std::string> problem;
  std::vector<std::string> lines;
  if (comm.rank() == 0) {
    try {
      if (o.schedule_file.empty() == !o.from_plan)
        throw UsageError("give either --schedule FILE or --from-plan");
      if (!(o.tolerance > 0 && std::isfinite(o.tolerance))) {
        throw UsageError(fmt::format(
            "--tolerance must be a positive number (got {}): the largest allowed |simulated / "
            "model - 1| per round",
            o.tolerance));
      }
      if (o.rounds && *o.rounds == 0)
        throw UsageError("--rounds must be at least 1 (got 0); leave it out for the default");
      check_plan_flags(o.plan);
      const auto t = wan::load_topology(topology_options(o.plan, o.plan.fpga_memory_bytes));
      std::vector<Candidate> candidates;
      double payload = o.plan.payload_bytes.value_or(kDefaultPayloadBytes);
      std::optional<wan::ScheduleFile> file;
      std::vector<std::pair<std::string, std::string>> not_applicable;  // baseline, why
      if (!o.schedule_file.empty()) {
        file = wan::read_schedule_file(o.schedule_file);
        if (!o.plan.payload_bytes) payload = file->payload_bytes;
      }
      const auto po = wan::plan_options(t, plan_request(o.plan, payload));
      const std::uint64_t chunk = po.round.chunk_bytes;
      if (file) {
        candidates.push_back({file->name, wan::rounds_on(*file, t), file->rounds_to_consensus});
      } else {
        auto all = wan::baselines(t, po);
        all.insert(all.begin(), wan::best_plan(t, po));
        if (const auto why = wan::hierarchical_not_applicable(t))
          not_applicable.emplace_back("hierarchical", *why);
        for (const auto& e : all) candidates.push_back({e.name, e.resolved, e.rounds});
      }
      wan::SimulationOptions so;
      so.round = po.round;
      so.throttle = !o.no_throttle;
      so.flow_level_unicast = o.flow_level_unicast;
      const double memory = static_cast<double>(t.site(0).fpga_memory_bytes);

      // A baseline the model cannot run (a multicast clique that does not fit the memory) is
      // reported, not simulated.
      std::vector<Compared> results;
      std::vector<std::string> infeasible;
      for (const auto& c : candidates) {
        bool runs = true;
        for (const auto& r : c.period)
          runs = runs && std::isfinite(wan::round_time(t, r, so.round));
        if (!runs && o.from_plan && c.name != "planned") {
          infeasible.push_back(c.name);
          continue;
        }
        results.push_back(compare(t, c, so, o.rounds));
      }

      std::vector<std::string> disagree, overflow;
      for (const auto& r : results) {
        for (std::size_t k = 0; k < r.rounds; ++k) {
          if (std::abs(r.simulated_s[k] / r.model_s[k] - 1) > o.tolerance) {
            disagree.push_back(fmt::format("{} round {} (model {:.4f} s, simulated {:.4f} s)",
                                           r.name, k + 1, r.model_s[k], r.simulated_s[k]));
          }
        }
        if (r.overflow_bytes > 0)
          overflow.push_back(fmt::format("{} (+{:.4g} B)", r.name, r.overflow_bytes));
      }
      // The targets, as simulated (only meaningful for the planner's set of schedules).
      nlohmann::json summary = {{"summary", true},
                                {"fpga_memory_bytes", memory},
                                {"payload_bytes", payload},
                                {"tolerance", o.tolerance},
                                {"within_tolerance", disagree.empty()},
                                {"buffers_bounded", overflow.empty() || o.no_throttle},
                                {"infeasible_not_simulated", infeasible}};
      for (const auto& [name, why] : not_applicable) summary["not_applicable"][name] = why;
      if (o.from_plan) {
        const auto& planned = results.front();
        double unicast = 0, best_baseline = std::numeric_limits<double>::infinity();
        std::string best_name;
        for (std::size_t i = 1; i < results.size(); ++i) {
          if (!results[i].reaches_consensus) continue;
          if (results[i].name == "all_to_all_unicast") unicast = results[i].simulated_total_s;
          if (results[i].simulated_total_s < best_baseline) {
            best_baseline = results[i].simulated_total_s;
            best_name = results[i].name;
          }
        }
        summary["simulated_speedup_vs_all_to_all_unicast"] = unicast / planned.simulated_total_s;
        summary["simulated_speedup_vs_best_baseline"] = best_baseline / planned.simulated_total_s;
        summary["best_baseline"] = best_name;
        wan::RoundOptions bound_options;
        bound_options.payload_bytes = payload;
        if (const auto bound = wan::consensus_time_lower_bound(t, bound_options, o.plan.epsilon)) {
          summary["lower_bound_s"] = *bound;
          summary["bound_allows_speedup_vs_all_to_all_unicast"] = unicast / *bound;
        }
        for (const auto& r : results) {
          if (r.name == "all_to_all_unicast")
            summary["model_speedup_vs_all_to_all_unicast"] =
                r.model_total_s / planned.model_total_s;
        }
      }
      if (o.plan.json) {
        for (const auto& r : results) lines.push_back(to_json(r, memory, payload).dump());
        lines.push_back(summary.dump());
      } else {
        lines.push_back(fmt::format(
            "{} sites, payload {:.4g} B, FPGA memory {:.4g} B, chunk {}, tolerance {:g}", t.size(),
            payload, memory, chunk ? fmt::format("{} B", chunk) : std::string("per clique"),
            o.tolerance));
        lines.push_back(fmt::format("{:<26} {:>5} {:>10} {:>10} {:>7} {:>14}", "schedule", "round",
                                    "model_s", "sim_s", "ratio", "peak_buffer_B"));
        for (const auto& r : results) {
          for (std::size_t k = 0; k < r.rounds; ++k) {
            lines.push_back(fmt::format("{:<26} {:>5} {:>10.4f} {:>10.4f} {:>7.3f}", r.name, k + 1,
                                        r.model_s[k], r.simulated_s[k],
                                        r.simulated_s[k] / r.model_s[k]));
          }
          lines.push_back(fmt::format("{:<26} {:>5} {:>10.4f} {:>10.4f} {:>7.3f} {:>14.4g}", r.name,
                                      "total", r.model_total_s, r.simulated_total_s,
                                      r.simulated_total_s / r.model_total_s, r.peak_buffer_bytes));
        }
        for (const auto& name : infeasible)
          lines.push_back(
              fmt::format("{:<26} infeasible at this FPGA memory: not simulated", name));
        for (const auto& [name, why] : not_applicable)
          lines.push_back(fmt::format("{:<26} not applicable, not simulated: {}", name, why));
        if (o.from_plan) {
          const double speedup = summary["simulated_speedup_vs_all_to_all_unicast"];
          std::string limit;
          if (summary.contains("lower_bound_s")) {
            limit =
                fmt::format("; the lower bound for any schedule ({:.4f} s) allows at most {:.2f}x",
                            summary["lower_bound_s"].get<double>(),
                            summary["bound_allows_speedup_vs_all_to_all_unicast"].get<double>());
          }
          lines.push_back(fmt::format(
              "planned vs all-to-all unicast: {:.2f}x sooner simulated ({:.2f}x model); target 2x: "
              "{}{}",
              speedup, summary["model_speedup_vs_all_to_all_unicast"].get<double>(),
              speedup >= 2 ? "met" : "MISSED", limit));
          lines.push_back(fmt::format("planned vs best baseline ({}): {:.3f}x (>= 1: no later)",
                                      summary["best_baseline"].get<std::string>(),
                                      summary["simulated_speedup_vs_best_baseline"].get<double>()));
        }
      }
      if (!disagree.empty()) {
        std::string list;
        for (const auto& d : disagree) list += (list.empty() ? "" : "; ") + d;
        problem = fmt::format("model and simulation differ by more than {:g}% on {}",
                              o.tolerance * 100, list);
      } else if (!overflow.empty() && !o.no_throttle) {
        std::string list;
        for (const auto& d : overflow) list += (list.empty() ? "" : ", ") + d;
        problem = "an FPGA buffer exceeded its memory despite throttling: " + list;
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  for (const auto& l : lines) std::cout << l << "\n";
  std::cout.flush();
  comm.agree(problem);
  return 0;
}

}  // namespace atl::cli
