// The network as the alpha-beta model sees it, measured on the communicator's own links: α from
// a ping-pong of 8 B, b from one of 1 MiB, between rank pairs (r, r + n/2), all pairs at once,
// the slowest pair taken, best of 3 (the simulated network under SMPI); α no less than one round
// of 8 B to every peer at once, timed over rounds back to back (up to kDirectRanks ranks). With
// nodes of several consecutive ranks, pairs span nodes, and the node's ranks share its link: b is
// then the share of one rank when all send at once. `auto` ranks schemes with it; `bench sync
// --breakdown` charges each phase's bytes with it.
#pragma once

#include "atoll/comm/communicator.h"
#include "atoll/cost/cost_model.h"

namespace atl::sync {

// Collective. With one rank, cost::Network's defaults.
cost::Network probe_network(comm::Communicator& comm);

// The network-only time of a phase that moved at most `bytes_sent` and `bytes_received` on any
// rank: one latency plus the larger direction at the link's bandwidth (full duplex), a lower
// bound on the phase's time on that network; 0 for a phase that moved nothing.
double network_only_time(const cost::Network& net, std::uint64_t bytes_sent,
                         std::uint64_t bytes_received);

}  // namespace atl::sync
