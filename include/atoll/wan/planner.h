// The schedule planner: which rotating cliques of sites should synchronize in each round so that
// all sites reach ε-consensus soonest (wan.md), under each site's FPGA memory.
//
// Search space (exhaustive where N allows): periodic schedules of period 1 or 2 whose rounds are
// partitions of all N sites into cliques of at least two sites (3,425 partitions for N = 9).
// Candidates are ranked by an upper bound on their time to ε-consensus, 2·⌈log ε / log ρ⌉ rounds
// of (τ1 + τ2)/2 each, where ρ is the period's consensus rate (power iteration); a pair is skipped
// when even its lower bound τ1 + τ2 cannot beat the best found. The chosen schedule's figures are
// then computed exactly (rounds_to_consensus). Period 2 contains the affine-plane triads: any two
// orthogonal parallel classes of AG(2,3) already reach exact consensus.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atoll/wan/mixing.h"
#include "atoll/wan/round_model.h"
#include "atoll/wan/topology.h"

namespace atl::wan {

struct PlanOptions {
  RoundOptions round;
  double epsilon = 1e-3;
  std::size_t max_rounds = 100000;
};

// The payload `atoll plan` assumes when none is given (bytes per site per exchange).
inline constexpr double kDefaultPayloadBytes = 100e6;

// What a caller (the planner's command line, the trainer) asks to plan for.
struct PlanRequest {
  double payload_bytes = kDefaultPayloadBytes;  // > 0, finite
  std::uint64_t chunk_bytes = 0;  // FPGA aggregation unit; 0: chosen per clique (round_model.h)
  double compute_s = 0;           // local work per round, >= 0
  double epsilon = 1e-3;          // consensus target, in (0, 1)
};

// PlanOptions for `request` on `topology` (the aggregation unit as requested: 0 lets each
// multicast clique choose its own, RoundOptions::chunk_bytes). std::invalid_argument naming the
// field when a value is out of range.
PlanOptions plan_options(const Topology& topology, const PlanRequest& request);

// One unit for every clique: `chunk_bytes` if non-zero, else default_chunk_bytes(topology,
// payload_bytes). (plan_options no longer pins a unit; kept for callers that want one.)
std::uint64_t aggregation_unit(const Topology& topology, double payload_bytes,
                               std::uint64_t chunk_bytes);

struct EvaluatedSchedule {
  std::string name;
  Transport transport = Transport::multicast_fpga;
  Schedule schedule;
  std::vector<double> round_times_s;  // one per round of the period
  double rho = 1;                     // consensus rate of one period
  std::optional<std::size_t> rounds;  // rounds to ε-consensus
  double time_to_consensus_s = 0;     // +inf if never, or if infeasible
  // false: some round has a clique that cannot run at this FPGA memory (its round time is +inf;
  // CliqueCost::feasible). Callers print it as infeasible, never as a time.
  bool feasible = true;
  std::size_t max_clique_size = 0;
  std::vector<ResolvedRound> resolved;  // how each round runs (transport per clique decided)
};

EvaluatedSchedule evaluate(const Topology& topology, std::string name, Schedule schedule,
                           Transport transport, const PlanOptions& options);

// Every partition of {0..n-1} into blocks of size >= 2 (n <= 12).
std::vector<Partition> partitions_without_singletons(std::size_t n);

// Exhaustive search over period-1 and period-2 schedules; each clique uses multicast + FPGA,
// unicast or ring allreduce, whichever is fastest for it (Transport::best). Named "planned".
// std::invalid_argument if epsilon is not in (0, 1) or no clique fits any site's FPGA memory.
EvaluatedSchedule plan_exhaustive(const Topology& topology, const PlanOptions& options);

// Heuristic for site counts beyond exhaustive reach: candidate rounds are greedy latency clusters
// of every clique size k (each site joins the clique whose farthest member is nearest) and their
// "transversals" (cliques made of one member of each first-round clique, rotated), improved by
// local search (swap two sites between cliques while the bound improves); the best period-1 or
// period-2 schedule among them is returned, named "planned_heuristic".
EvaluatedSchedule plan_heuristic(const Topology& topology, const PlanOptions& options);

// Up to this many sites best_plan searches exhaustively (3,425 partitions for 9 sites, about 10
// times more per added site); beyond, it uses the heuristic.
inline constexpr std::size_t kExhaustiveMaxSites = 10;

// The planner's best schedule: plan_exhaustive up to kExhaustiveMaxSites, plan_heuristic beyond,
// named "planned" whichever search found it. Throws as they do.
EvaluatedSchedule best_plan(const Topology& topology, const PlanOptions& options);

// A lower bound on the time to ε-consensus of any schedule, any transport (for ε < 1/N, where
// every site's result must depend on every other site's payload): site i cannot hold a result
// before the payload of its farthest site j has reached it along the fastest chain of sites,
// d*(j, i) (shortest paths over the one-way latencies), and every one of the S bytes it receives
// that depends on j crosses its ingress link after that:
//     T ≥ max_i ( max_{j≠i} d*(j, i) + S / I_i ).
// All-to-all unicast over T_lb is the largest speed-up any planner can show against it.
// (If j's payload is missing from i's result, entry (i, j) of Φ − J is −1/N, so ||Φ − J||₂ ≥ 1/N.)
// std::nullopt when epsilon ≥ 1/N: then a result may leave a site out and no such bound holds.
std::optional<double> consensus_time_lower_bound(const Topology& topology,
                                                 const RoundOptions& options, double epsilon);

// The comparison points: all-to-all unicast, all-to-all multicast + FPGA, ring allreduce across
// sites, hierarchical (continents, then one leader per continent, then continents again; a site
// alone on its continent idles in rounds 1 and 3). Hierarchical is left out where it does not
// apply (hierarchical_not_applicable).
std::vector<EvaluatedSchedule> baselines(const Topology& topology, const PlanOptions& options);

// Why the hierarchical baseline does not apply to this topology (all sites on one continent, or
// one site per continent: either way it degenerates into all-to-all unicast), or nullopt.
std::optional<std::string> hierarchical_not_applicable(const Topology& topology);

}  // namespace atl::wan
