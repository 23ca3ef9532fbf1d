// The WAN simulator: runs a schedule's rounds on a SimGrid S4U model of the topology and reports
// per-round times and FPGA buffer occupancy, to check the round model (round_model.h).
//
// Platform (built from the Topology): per site three hosts — the site, its multicast replication
// point on the WAN side of its egress link, and its FPGA on the WAN side of its ingress link.
// Links: egress_i (E_i), ingress_i (I_i), both latency 0; one WAN link per ordered site pair with
// the one-way latency ℓ_ij and a bandwidth far above any site's (the core is not the bottleneck,
// as in the model). Network model CM02 with TCP-gamma 0 and no ACK cross-traffic: a transfer of S
// bytes alone on a route takes exactly ℓ + S / B (no latency or bandwidth factors, no TCP window
// cap; see docs/wan.md for why the defaults distort a long fat pipe).
//
// Actors, per exchange of a round (the exchange kinds of round_model.h):
// - multicast_fpga, clique C: each member's sender splits the payload into chunks and pushes them
//   over its egress link at the clique rate R (the throttling rule of round_model.h: the largest
//   rate whose skew buffer fits every member's FPGA memory), starting at its staggered offset
//   δ_s (round_model.h; zero unless the clique is throttled); the replication point forwards one
//   copy of each chunk to the FPGA of every other member; each FPGA holds chunk j of each source
//   until chunk j of every source in C has arrived, then sends the aggregate over the ingress link
//   and frees the k−1 chunks when that send completes. Occupancy is sampled on every change.
// - unicast, clique C: every member sends S to every other member as k−1 chunk streams
//   interleaved on its egress link (fair share), carried with the pair's latency and queued in
//   arrival order at the receiver's ingress link. (flow_level_unicast: one SimGrid flow per pair
//   instead; SimGrid charges a flow's latency before its bytes, so the nearest flows take a shared
//   link first, which a fair TCP sender does not do: optimistic by up to ~25% on the nine cities.)
// - ring_allreduce: 2(k−1) steps of S/k to the ring successor; a site sends step t once it has
//   received step t−1.
// A round ends when the last member of the last exchange has its result; rounds run back to back
// (plus the compute time between rounds).
//
// SimGrid allows one engine per process and its library exports MPI symbols, so the simulation
// runs in a child process: the executable atoll-wan-sim-engine (this header is SimGrid-free).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "atoll/wan/round_model.h"
#include "atoll/wan/topology.h"

namespace atl::wan {

class SimulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SimulationOptions {
  RoundOptions round;      // payload, chunk size, compute between rounds
  std::size_t rounds = 1;  // rounds to simulate, cycling through the period
  bool throttle = true;    // false: multicast senders at line rate whatever the FPGA memory
  bool flow_level_unicast = false;  // true: one SimGrid flow per unicast pair (optimistic)
  // Unicast streams are simulated in segments of this size (fair sharing at segment grain; no
  // FPGA involved, so independent of the aggregation unit).
  std::uint64_t unicast_segment_bytes = std::uint64_t{1} << 20;
  std::string engine_path;  // empty: the atoll-wan-sim-engine built with this library
};

struct SimulatedRound {
  double time_s = 0;                      // from the round's start to its last result (+compute)
  std::vector<double> peak_buffer_bytes;  // per site: most bytes held by its FPGA this round
  double overflow_bytes = 0;  // largest excess of a buffer over its FPGA memory (0: bounded)
};

struct SimulationResult {
  std::vector<SimulatedRound> rounds;
  double total_time_s = 0;
  std::uint64_t messages = 0;  // simulated transfers
  double wall_s = 0;           // host time the simulation took
};

// Validates (every group's sites in range and disjoint within a round, payload and chunk
// positive, rounds >= 1) and runs the simulation in atoll-wan-sim-engine. SimulationError if the
// engine fails; std::invalid_argument on bad input.
SimulationResult simulate(const Topology& topology, const std::vector<ResolvedRound>& period,
                          const SimulationOptions& options);

}  // namespace atl::wan
