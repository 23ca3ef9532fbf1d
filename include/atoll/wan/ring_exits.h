// The ring allreduce of round_model.h with members that enter at different times: when each member
// leaves. ring_allreduce_time assumes that every member enters at once, and then the latest member
// leaves after the critical path of T = 2(k−1) hops; in a training run the members do not (each
// leaves a ring at its own time, as its allgather chain ends, and enters the next one as far
// apart), and a late member finds several of its predecessor's blocks already there, posts its
// sends back to back, and they share its link, so each block reaches the successor later than the
// model's one block at a time (docs/results/wan-train.md, "The model clock against SimGrid").
//
// An event model of Communicator::ring_allreduce (every receive posted on entry; step t's send
// posted when step t−1's block from the predecessor has arrived, step 0's on entry):
//  - the transfer of block (i, t) from member i to i + 1 starts when its send is posted and the
//    receiver has entered (its receives are posted on entry, and a message moves once matched to
//    one, as under SMPI, whose small messages also wait for the match); after the hop's latency
//    its bytes flow at the hop's bandwidth, min(egress of i, ingress of i + 1), shared equally by
//    member i's transfers in flight (as SimGrid's max-min sharing does on the sender's link);
//  - a member leaves when its last block has arrived and its last send has been delivered (a
//    block up to kEagerBytes is sent detached: done when posted).
// Checked against SimGrid (scripts/results-ring-skew, the skew_model columns): every rank's exit
// within 6 µs, entered together, after a barrier and after another ring, 8 B to 9 MB.
// With equal entries and no overlapping transfers the latest exit is ring_allreduce_time (tested).
// Free of MPI: a function of the topology, the payload and the entry times.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/wan/round_model.h"

namespace atl::wan {

// Sends up to this many bytes are detached (SMPI's smpi/send-is-detached-thresh default).
inline constexpr double kEagerBytes = 65536;

// Each member's exit time, in `ring` order, for members entering at entries[i] (same clock).
// std::invalid_argument if the sizes differ.
std::vector<double> ring_allreduce_exits(const Topology& topology, const Clique& ring,
                                         const RoundOptions& options,
                                         std::span<const double> entries);

}  // namespace atl::wan
