// Cost of one synchronization round over the WAN (the model of wan.md, made precise here).
//
// A round is a partition of the sites into cliques; every member of a clique sends its payload of
// S bytes to every other member; cliques run in parallel; the round ends when the slowest clique
// ends (plus the compute between rounds).
//
// Unicast full mesh, clique C of k sites: sender s splits its egress over k-1 flows and receiver r
// its ingress over k-1 flows, so the flow s->r runs at min(E_s, I_r)/(k-1) and ends at
// ℓ_sr + (k-1)·S / min(E_s, I_r). Clique time: the latest flow.
//
// Multicast + edge-FPGA aggregation: each sender emits one stream at rate R (the network
// replicates it), the FPGA at each receiver's edge sums the k-1 inbound streams chunk by chunk and
// forwards one stream over the ingress link. Line rate R_line = min over members of egress and
// ingress. Streams from near peers arrive early and wait in the FPGA for the matching chunk of the
// farthest peer: at rate R receiver r needs
//     B_r(R) = Σ_{s≠r} min(R · (ℓ_max,r − ℓ_sr), S) + (k−1) · chunk · (1 + R / I_r)
// bytes: the skew buffer (at most the whole payload per stream) plus, per stream, the chunk whose
// sum is crossing the ingress link (it is freed when sent, chunk / I_r later) and the next one
// arriving meanwhile. Both corrections came from the simulator (simulator.h): a 100 MB all-to-all
// holds 0.70 GB, not the 3.8 GB of the uncapped R·Σ skew, and a pair at line rate holds two
// chunks, not one. Throttling rule: if B_r(R_line) exceeds the FPGA memory M_r, all senders of
// the clique slow down to the largest R with B_r(R) ≤ M_r for every member.
// Feasibility: a multicast clique is infeasible (time +inf, never a number) when some member's
// memory does not fit B_r at kMinRateFraction of the line rate, i.e. when it holds its (k−1)
// chunk slots with too little room left for the skew of any usable rate (B_r(R) → (k−1)·chunk
// as R → 0, so the memory must exceed the slots). Without that floor a memory just equal to the
// slots gave a positive rate of a few bytes per second and times like 1e16 s.
// Aggregation unit (chunk): a free parameter of the schedule. Unless the caller pins one
// (RoundOptions::chunk_bytes), each multicast clique takes, among the powers of two from
// smallest_chunk_bytes(S) to kLargestChunkBytes, the unit that finishes it soonest; B_r grows
// with the unit, so the smallest unit is never slower, and among units that finish equally soon
// (a clique at line rate) the largest is taken (fewer chunks: less per-chunk work in a real
// aggregator and in the simulator). Found when a 9-site clique with 8 MiB FPGAs and the old
// single unit of memory/8 filled its whole memory with chunk slots (issue 16).
// Clique time: max ℓ in the clique + S / R. The rate R is set when the clique starts, from the
// known latencies and the members' memories (an open-loop, rate-based throttle; the simulator,
// simulator.h, checks that the buffers it predicts are never exceeded).
//
// Staggered starts: sender s may start δ_s after the round begins. Stream s then reaches r at
// δ_s + ℓ_sr; with A_r = max_{s≠r} (δ_s + ℓ_sr) the skew of stream s at r is A_r − δ_s − ℓ_sr
// (it replaces ℓ_max,r − ℓ_sr in B_r) and the clique takes max_r A_r + S / R. For a triad with
// symmetric latencies the skews can all be made zero (δ_a − δ_b = ℓ_bc − ℓ_ac, and so on), so a
// triad needs only the chunk term; in larger cliques a linear program (GLPK) minimises the largest
// memory-weighted skew sum Σ_s skew_sr / M_r, under a few caps on max_r A_r. Staggering is
// considered only when the unstaggered clique is throttled (otherwise it cannot help); among the
// unstaggered and the staggered candidates the clique takes the one that finishes first.
//
// Ring allreduce over an ordered set of sites (reduce-scatter then allgather, T = 2(k−1) steps of
// S/k bytes to the ring successor): a site sends step t as soon as it has received step t−1 from
// its predecessor, so the critical path runs around the ring through T consecutive hops:
//     time = max over end site j of Σ_{u<T} ℓ(hop ending u hops before j) + T · (S/k) / B_min.
// (Corrected after simulation: an earlier version charged T times the slowest hop's latency.)
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/wan/mixing.h"
#include "atoll/wan/topology.h"

namespace atl::wan {

// `best`: each clique uses whichever of unicast, multicast + FPGA and ring allreduce (over the
// clique's sites in the order given, i.e. file order in the planner) finishes first: an
// intelligent network can fall back to unicast for a clique whose skew the FPGAs cannot absorb,
// and a bandwidth-bound clique whose FPGAs are throttled may do better with a ring, which moves
// 2(k−1)/k·S per site without any aggregation memory.
enum class Transport { unicast, multicast_fpga, best };

struct RoundOptions {
  double payload_bytes = 100e6;  // S
  // FPGA aggregation unit in bytes. 0: chosen per multicast clique (the unit that finishes the
  // clique soonest, see the header comment; CliqueCost::chunk_bytes reports it); non-zero: this
  // unit for every clique.
  std::uint64_t chunk_bytes = 0;
  double compute_s = 0;  // local work between rounds
};

// The largest aggregation unit the per-clique choice considers.
inline constexpr std::uint64_t kLargestChunkBytes = std::uint64_t{1} << 20;

// The smallest unit the per-clique choice considers: a power of two, at least 4 KiB and at least
// payload / 4096, so that a simulation stays within ~4k chunks per stream (1 GB at 64 KiB did not
// finish in 10 minutes). That floor is a simulation limit, not a property of FPGAs (which
// aggregate packet-sized units): at small memory and large payloads the model is pessimistic.
std::uint64_t smallest_chunk_bytes(double payload_bytes);

// A multicast clique is infeasible below this fraction of its line rate (header comment).
inline constexpr double kMinRateFraction = 1e-6;

// One unit for every clique (the planner's default before units were chosen per clique; pin it
// with RoundOptions::chunk_bytes to reproduce older results): a power of two, at most 1 MiB and
// at most 1/8 of the smallest FPGA memory, but at least smallest_chunk_bytes(payload). With 8 MiB
// FPGAs it fills a 9-site clique's memory with chunk slots: the per-clique choice replaces it.
std::uint64_t default_chunk_bytes(const Topology& topology, double payload_bytes);

// A clique's exchange with its transport decided.
enum class ExchangeKind { unicast, multicast_fpga, ring_allreduce };

struct CliqueCost {
  double time_s = 0;
  double rate_bytes_per_s = 0;  // per sender (multicast) or per flow (unicast)
  double buffer_bytes = 0;      // largest FPGA buffer needed at line rate (multicast only)
  bool throttled = false;
  // false: some member's FPGA memory cannot run the clique at kMinRateFraction of line rate
  // (it holds the (k−1) chunk slots and too little else); time_s is then +infinity.
  bool feasible = true;
  std::uint64_t chunk_bytes = 0;  // multicast: the aggregation unit used (pinned or chosen)
  // Multicast only: when each member (in clique order) starts sending, from the round's start;
  // all zero unless staggering finishes sooner.
  std::vector<double> start_offset_s;
  // How the clique runs: the transport asked for, or for Transport::best the fastest of the three
  // (ring_allreduce: time_s is ring_allreduce_time, the other fields are unset).
  ExchangeKind kind = ExchangeKind::multicast_fpga;
};

CliqueCost clique_cost(const Topology& topology, const Clique& clique, Transport transport,
                       const RoundOptions& options);

// Time of one round (slowest clique + compute); +infinity if a clique is infeasible.
double round_time(const Topology& topology, const Partition& round, Transport transport,
                  const RoundOptions& options);

// How one group of sites exchanges in a round, with the transport decided (what a schedule file
// stores and what the simulator runs).
struct Exchange {
  ExchangeKind kind = ExchangeKind::multicast_fpga;
  Clique sites;  // for ring_allreduce: in ring order
};
using ResolvedRound = std::vector<Exchange>;

const char* to_string(ExchangeKind kind);

// The cliques of `round` with Transport::best replaced by the fastest of the three for each clique.
ResolvedRound resolve(const Topology& topology, const Partition& round, Transport transport,
                      const RoundOptions& options);

// Ring allreduce over `ring` (in ring order), exact average at the end; see the header comment.
double ring_allreduce_time(const Topology& topology, const Clique& ring,
                           const RoundOptions& options);

double exchange_time(const Topology& topology, const Exchange& exchange,
                     const RoundOptions& options);

// Slowest exchange + compute; the round model as a library call for a resolved round.
double round_time(const Topology& topology, const ResolvedRound& round,
                  const RoundOptions& options);

}  // namespace atl::wan
