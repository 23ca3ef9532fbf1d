// A SimGrid platform (XML, version 4.1) for SMPI runs across WAN sites: one host per site, each
// behind its own access link, with the topology's one-way latency between every pair of sites —
// the latencies the planner uses (Topology::latency_s). `atoll wan-platform` writes it
// (scripts/make-wan-platform; docs/simulation.md, "A wide-area platform").
//
// Layout: one zone with routing="Full" (a SimGrid <cluster> cannot hold per-pair latencies):
//   - a host per site, id = the site code, in topology order (scripts/simulate places rank i on
//     the i-th host);
//   - `CODE-access`: the site's uplink, `access_bits_per_s` both ways at once (SPLITDUPLEX, as
//     scripts/make-platform's NICs), zero latency: the only bandwidth limit;
//   - `A-B`: the pair's latency link, FATPIPE at 1 Pbit/s (every flow gets it whole: the core is
//     never the bottleneck, as in the round model and the S4U simulator);
//   - a route for every pair: access(A) up, A-B, access(B) down; symmetrical when the latencies
//     are (the modelled ones always are), else one link and one route per direction.
// So a transfer of S bytes alone from A to B takes ℓ_AB + S / access bandwidth under
// scripts/simulate's alpha-beta settings. With node_cores > 1, a host has that many cores and a
// route to itself over `CODE-loopback`.
#pragma once

#include <string>

#include "atoll/wan/topology.h"

namespace atl::wan {

struct SmpiPlatformOptions {
  std::string name = "wan";        // the zone's id
  double access_bits_per_s = 1e9;  // every site's uplink, each direction; > 0
  double host_speed_flops = 1e9;   // against scripts/simulate's smpi/host-speed:1Gf: 1:1
  std::string comment;             // written in the header comment (e.g. how it was generated)
  // SMPI settings for this platform (KEY:VALUE, space-separated), stored as the zone property
  // atoll_smpi_cfg; scripts/simulate passes each as --cfg. Empty: no property.
  std::string smpi_cfg;
  // Cores per site's host, for up to that many ranks per site (scripts/simulate
  // --ranks-per-host; the 2-D mesh's shard groups) that compute at once at host_speed_flops each
  // (with one core they would share it) and reach each other through the host's loopback route,
  // a link of 20 GByte/s and 0.5 µs (shared memory, as scripts/make-platform --node-cores).
  int node_cores = 1;
};

// The collective algorithms chosen on wan-8x1g (8 sites, 1 Gbit/s, 2-103 ms one way;
// measurements in docs/simulation.md, "A wide-area platform"): allreduce rab2 (Rabenseifner's
// variant: alltoall reduce-scatter, then allgather) was faster than the ompi selector's choice at
// 1, 8, 32 and 64 MiB and the fastest from ~20 MiB up (recursive doubling wins below); allgatherv
// `default` (every rank posts all its sends and receives at once: one latency, not 7 ring steps)
// was the fastest at every size measured; bcast binomial_tree (the default selector's NTSL, a
// pipelined linear chain of small segments, did not finish broadcasting the base preset's 60 MB
// of initial parameters in 8 minutes of host time). `atoll wan-platform` writes them unless told
// otherwise.
inline constexpr const char* kWanSmpiCollectives =
    "smpi/allreduce:rab2 smpi/allgatherv:default smpi/bcast:binomial_tree";

// The platform's XML text. std::invalid_argument on a non-positive bandwidth, speed or core count,
// or a setting that would break the XML attribute (a quote, '<', '&').
std::string smpi_platform_xml(const Topology& topology, const SmpiPlatformOptions& options);

// A SimGrid quantity with a unit as bits per second: "1Gbps", "100Mbps", "10GBps" (bytes),
// "2.5e9bps"; prefixes k, M, G, T (powers of 1000). std::invalid_argument naming the text.
double parse_bandwidth_bits_per_s(const std::string& text);

}  // namespace atl::wan
