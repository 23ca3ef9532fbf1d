#include "atoll/sync/network_probe.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace atl::sync {

cost::Network probe_network(comm::Communicator& comm) {
  cost::Network net;
  // Rank r with r + n/2: ranks far apart, so on nodes of consecutive ranks a pair spans two nodes
  // (r XOR 1 measured the node's shared memory there); with n odd the last rank sits out.
  const int half = comm.size() / 2, r = comm.rank();
  const int partner = r < half ? r + half : r - half;
  const bool paired = r < 2 * half;
  auto time_exchange = [&](std::size_t bytes) {
    std::vector<std::uint8_t> send(bytes, 1), recv(bytes);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      comm.barrier();
      const double t0 = comm.wtime();
      if (paired) comm.sendrecv<std::uint8_t>(send, partner, recv, partner);
      best = std::min(best, comm.wtime() - t0);
    }
    return comm.allreduce_value<double>(paired ? best : 0.0, comm::ReduceOp::max);
  };
  if (comm.size() < 2) return net;
  const double small = time_exchange(8);
  const std::size_t big_bytes = std::size_t{1} << 20;
  const double big = time_exchange(big_bytes);
  net.latency_s = std::max(small, 1e-9);
  net.bandwidth_bytes_per_s = big_bytes / std::max(big - small, 1e-9);
  // A round of an exchange with every peer at once (Zen's, the input check's) waits for the
  // slowest of all pairs, which the pairs above need not include (a WAN's sites differ): α is
  // the larger of the two. Timed as a multi-round scheme meets it, rounds back to back: after one
  // untimed exchange (ranks leave a barrier up to a latency apart across a WAN, which a single
  // timed exchange would count), the mean of kRounds. Only where the exchange is direct
  // (Communicator::kDirectRanks).
  if (comm.size() > 2 && comm.size() <= comm::Communicator::kDirectRanks) {
    constexpr int kRounds = 3;
    const std::uint64_t mine = 1;
    comm.barrier();
    comm.allgather_direct<std::uint64_t>(mine);
    const double t0 = comm.wtime();
    for (int round = 0; round < kRounds; ++round) comm.allgather_direct<std::uint64_t>(mine);
    const double per_round = (comm.wtime() - t0) / kRounds;
    net.latency_s =
        std::max(net.latency_s, comm.allreduce_value<double>(per_round, comm::ReduceOp::max));
  }
  return net;
}

double network_only_time(const cost::Network& net, std::uint64_t bytes_sent,
                         std::uint64_t bytes_received) {
  const auto most = std::max(bytes_sent, bytes_received);
  if (most == 0) return 0.0;
  return net.latency_s + static_cast<double>(most) / net.bandwidth_bytes_per_s;
}

}  // namespace atl::sync
