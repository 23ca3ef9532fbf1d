// atoll-ring-skew-smpi: why the ring clique's simulated time exceeds the round model's at 1 Gbit/s
// (docs/results/wan-train.md, "The model clock against SimGrid"). Under SMPI on a platform of the
// nine cities (`atoll wan-platform`), one rank per site, it runs Communicator::ring_allreduce (the
// ring clique's code) on a payload of P bytes three ways: every rank entering at the same
// simulated instant (each sleeps until an agreed time); right after a barrier, which with these
// latencies lets the ranks in tens of ms apart; and right after another ring that started
// synchronized, as in a training run, where each site's next meeting starts when its last one
// ended (plus the same compute everywhere). For each it prints
// one JSON line: the ranks' entry spread, the time from the latest entry to the latest exit, and
// the round model's ring_allreduce_time for the same sites, order, bandwidth and payload.
//   scripts/simulate --cfg smpi/simulate-computation:no --binary build/atoll-ring-skew-smpi
//     PLATFORM.xml 9 -- TOPOLOGY.csv GBPS PAYLOAD_BYTES...        (scripts/results-ring-skew)
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/wan/ring_exits.h"
#include "atoll/wan/round_model.h"
#include "atoll/wan/topology.h"

namespace {

using atl::comm::Communicator;

// Entry and exit times (simulated seconds) of every rank, gathered on all.
struct Span {
  double spread, latest_entry_to_latest_exit;
  std::vector<double> entries, exits;
};

enum class Entry { synchronized, after_barrier, after_ring };
const char* to_string(Entry e) {
  return e == Entry::synchronized    ? "synchronized"
         : e == Entry::after_barrier ? "after_barrier"
                                     : "after_ring";
}

Span ring_once(Communicator& comm, std::size_t floats, Entry how) {
  std::vector<float> data(floats, 1.0f);
  comm.barrier();
  if (how != Entry::after_barrier) {  // every rank at once: 1 s after the last barrier exit
    const double start = comm.allreduce_value(comm.wtime(), atl::comm::ReduceOp::max) + 1.0;
    ::usleep(static_cast<useconds_t>((start - comm.wtime()) * 1e6));
  }
  if (how == Entry::after_ring) {  // enter as the previous ring left each rank (a training run)
    comm.ring_allreduce(std::span<float>(data), atl::comm::ReduceOp::sum);
    std::fill(data.begin(), data.end(), 1.0f);
  }
  const double entry = comm.wtime();
  comm.ring_allreduce(std::span<float>(data), atl::comm::ReduceOp::sum);
  const double exit = comm.wtime();
  if (data.front() != static_cast<float>(comm.size()))
    throw std::runtime_error("ring allreduce gave a wrong sum");
  auto entries = comm.allgather(entry);
  auto exits = comm.allgather(exit);
  const double first = *std::min_element(entries.begin(), entries.end());
  const double last = *std::max_element(entries.begin(), entries.end());
  const double end = *std::max_element(exits.begin(), exits.end());
  return {last - first, end - last, std::move(entries), std::move(exits)};
}

// The entry-skew model's time (ring_exits.h) from the same entries: latest entry to latest exit,
// and the largest gap between a rank's simulated and modelled exit.
std::pair<double, double> skew_model(const atl::wan::Topology& topology,
                                     const atl::wan::Clique& ring, const atl::wan::RoundOptions& o,
                                     const Span& s) {
  const auto exits = atl::wan::ring_allreduce_exits(topology, ring, o, s.entries);
  double gap = 0;
  for (std::size_t i = 0; i < exits.size(); ++i)
    gap = std::max(gap, std::abs(exits[i] - s.exits[i]));
  return {*std::max_element(exits.begin(), exits.end()) -
              *std::max_element(s.entries.begin(), s.entries.end()),
          gap};
}

}  // namespace

int main(int argc, char** argv) {
  atl::comm::MpiRuntime runtime(&argc, &argv);
  auto comm = Communicator::world();
  if (argc < 4) {
    if (comm.rank() == 0)
      std::fprintf(stderr, "usage: atoll-ring-skew-smpi TOPOLOGY.csv GBPS PAYLOAD_BYTES...\n");
    return 2;
  }
  try {
    atl::wan::TopologyOptions o;
    o.topology_file = argv[1];
    o.egress_bytes_per_s = o.ingress_bytes_per_s = std::stod(argv[2]) * 1e9 / 8;
    const auto topology = atl::wan::load_topology(o);
    if (topology.size() != static_cast<std::size_t>(comm.size()))
      throw std::runtime_error(fmt::format("{} sites, {} ranks", topology.size(), comm.size()));
    atl::wan::Clique ring(topology.size());
    std::iota(ring.begin(), ring.end(), std::size_t{0});
    for (int a = 3; a < argc; ++a) {
      const double payload = std::stod(argv[a]);
      const auto floats = static_cast<std::size_t>(payload / sizeof(float));
      atl::wan::RoundOptions ro;
      ro.payload_bytes = static_cast<double>(floats * sizeof(float));
      const double model = atl::wan::ring_allreduce_time(topology, ring, ro);
      for (const Entry how : {Entry::synchronized, Entry::after_barrier, Entry::after_ring}) {
        const Span s = ring_once(comm, floats, how);
        const auto [skewed, gap] = skew_model(topology, ring, ro, s);
        if (comm.rank() == 0)
          std::printf(
              "{\"gbps\":%s,\"payload_bytes\":%.0f,\"entry\":\"%s\",\"entry_spread_s\":%.6f,"
              "\"simulated_s\":%.6f,\"model_s\":%.6f,\"ratio\":%.4f,\"skew_model_s\":%.6f,"
              "\"skew_ratio\":%.4f,\"skew_model_exit_gap_s\":%.6f}\n",
              argv[2], ro.payload_bytes, to_string(how), s.spread, s.latest_entry_to_latest_exit,
              model, s.latest_entry_to_latest_exit / model, skewed,
              s.latest_entry_to_latest_exit / skewed, gap);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "atoll-ring-skew-smpi (rank %d): %s\n", comm.rank(), e.what());
    return 1;
  }
  return 0;
}
