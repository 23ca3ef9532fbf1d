// Zen's push and pull transport, flat or in groups of ranks (zen_groups.h).
#include "zen_groups.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <functional>
#include <stdexcept>
#include <string>

#include "atoll/comm/charged_work.h"

namespace atl::sync {
ZenGroups::ZenGroups(std::uint32_t group, bool group_push, std::size_t merge_op)
    : requested_(group), group_push_(group_push), merge_op_(merge_op) {}

namespace {

// The ranks per node, where every node has as many, there are several nodes and each node's ranks
// are consecutive (mpirun's default placement by slot; --map-by node interleaves them); 1
// otherwise. Collective.
std::uint32_t node_group(Communicator& comm) {
  const auto n = static_cast<std::uint32_t>(comm.size());
  const int least = comm.allreduce_value(comm.ranks_on_node(), comm::ReduceOp::min);
  const int most = comm.allreduce_value(comm.ranks_on_node(), comm::ReduceOp::max);
  if (least != most || static_cast<std::uint32_t>(least) >= n) return 1;
  const auto g = static_cast<std::uint32_t>(least);
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) name[0] = '\0';
  const auto hosts = comm.allgather<std::uint64_t>(std::hash<std::string>{}(name.data()));
  for (std::uint32_t r = 0; r < n; ++r)
    if (hosts[r] != hosts[r / g * g]) return 1;
  return g;
}

}  // namespace

std::uint32_t ZenGroups::resolve(Communicator& comm) {
  if (group_ != 0) return group_;
  const auto n = static_cast<std::uint32_t>(comm.size());
  std::uint32_t g = requested_;
  if (g == 0) g = node_group(comm);
  if (g > n || n % g != 0) {
    throw std::invalid_argument(fmt::format(
        "zen group {} does not divide the {} ranks (a group is that many consecutive ranks; "
        "1 is flat: every exchange with every rank directly)",
        g, n));
  }
  if (g > 1) {
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    node_.emplace(comm.split(static_cast<int>(rank / g), static_cast<int>(rank % g)));
    column_.emplace(comm.split(static_cast<int>(rank % g), static_cast<int>(rank / g)));
    for (std::uint32_t l = 0; l < g; ++l)  // the pull's blocks: column by column
      for (std::uint32_t h = 0; h < n / g; ++h) order_.push_back(h * g + l);
  }
  group_ = g;
  return g;
}

template <class Index>
void ZenGroups::push(Communicator& comm, HashPartition<Index>& part,
                     std::vector<Entry<Index>>& received, std::vector<std::size_t>& recv_counts) {
  if (resolve(comm) > 1 && group_push_) return grouped_push(comm, part, received, recv_counts);
  recv_counts = comm.alltoall<std::size_t>(part.counts);
  std::size_t total = 0;
  for (auto c : recv_counts) total += c;
  received.resize(total);
  comm.alltoallv<Entry<Index>>(part.entries, part.counts, received, recv_counts);
}

template <class Index>
void ZenGroups::grouped_push(Communicator& comm, HashPartition<Index>& part,
                             std::vector<Entry<Index>>& received,
                             std::vector<std::size_t>& recv_counts) {
  const std::uint32_t n = static_cast<std::uint32_t>(comm.size()), G = group_, groups = n / G;
  const std::uint32_t local = static_cast<std::uint32_t>(comm.rank()) % G;
  Buffers<Index>& b = buffers<Index>();
  // 1. Within the group: to local peer p, the blocks for servers p, G + p, ... (in that order),
  // with each block's count.
  std::vector<std::size_t> offsets(n + 1, 0);
  for (std::uint32_t s = 0; s < n; ++s) offsets[s + 1] = offsets[s] + part.counts[s];
  b.sub_counts.resize(n);
  std::vector<std::size_t> send_counts(G, 0);
  {
    comm::ChargedWork work(comm, merge_op_, static_cast<double>(part.entries.size()));
    b.send.resize(part.entries.size());
    auto* dst = b.send.data();
    for (std::uint32_t p = 0; p < G; ++p)
      for (std::uint32_t h = 0; h < groups; ++h) {
        const std::uint32_t s = h * G + p;
        b.sub_counts[p * groups + h] = part.counts[s];
        send_counts[p] += part.counts[s];
        dst = std::copy(part.entries.begin() + static_cast<std::ptrdiff_t>(offsets[s]),
                        part.entries.begin() + static_cast<std::ptrdiff_t>(offsets[s + 1]), dst);
      }
  }
  const std::vector<std::size_t> per_peer(G, groups);
  b.recv_sub.resize(std::size_t{G} * groups);
  node_->alltoallv<std::size_t>(b.sub_counts, per_peer, b.recv_sub, per_peer);
  std::vector<std::size_t> recv_counts1(G, 0);
  std::size_t total1 = 0;
  for (std::uint32_t p = 0; p < G; ++p)
    for (std::uint32_t h = 0; h < groups; ++h) recv_counts1[p] += b.recv_sub[p * groups + h];
  for (auto c : recv_counts1) total1 += c;
  b.gathered.resize(total1);
  node_->alltoallv<Entry<Index>>(b.send, send_counts, b.gathered, recv_counts1);
  // Sum, per server (h, local), the G peers' blocks.
  std::vector<std::size_t> merged_counts(groups, 0);
  {
    comm::ChargedWork work(comm, merge_op_, static_cast<double>(total1));
    std::vector<std::size_t> cursor(G, 0);  // each peer's next block in `gathered`
    for (std::uint32_t p = 1; p < G; ++p) cursor[p] = cursor[p - 1] + recv_counts1[p - 1];
    std::vector<std::span<const Entry<Index>>> runs(G);
    b.merged.clear();
    for (std::uint32_t h = 0; h < groups; ++h) {
      for (std::uint32_t p = 0; p < G; ++p) {
        const std::size_t c = b.recv_sub[p * groups + h];
        runs[p] = std::span<const Entry<Index>>(b.gathered.data() + cursor[p], c);
        cursor[p] += c;
      }
      const std::size_t before = b.merged.size();
      zen_merge_sum<Index>(runs, b.merged, b.tmp);
      merged_counts[h] = b.merged.size() - before;
    }
  }
  // 2. Between groups: server (h, local) gets the sum of group `this` for it.
  const auto counts2 = column_->alltoall<std::size_t>(merged_counts);
  std::size_t total2 = 0;
  for (auto c : counts2) total2 += c;
  received.resize(total2);
  column_->alltoallv<Entry<Index>>(b.merged, merged_counts, received, counts2);
  recv_counts.assign(n, 0);
  for (std::uint32_t h = 0; h < groups; ++h) recv_counts[h * G + local] = counts2[h];
  report_traffic(comm);
}

void ZenGroups::report_traffic(Communicator& comm) {
  const comm::TrafficCounters now = column_->traffic();
  comm.add_traffic(now.bytes_sent - reported_.bytes_sent,
                   now.bytes_received - reported_.bytes_received);
  reported_ = now;
}

void ZenGroups::post_pull(Communicator& comm, std::span<const std::uint8_t> mine,
                          std::span<const std::size_t> counts, std::span<std::uint8_t> recv,
                          PullChunk& chunk) {
  chunk.recv = recv;
  if (resolve(comm) == 1) {
    chunk.request = comm.iallgatherv<std::uint8_t>(mine, counts, recv);
    return;
  }
  const std::uint32_t n = static_cast<std::uint32_t>(comm.size()), G = group_, groups = n / G;
  const std::uint32_t local = static_cast<std::uint32_t>(comm.rank()) % G;
  // step_counts: [0, groups) the column's blocks (servers (h, local)), [groups, groups + G) what
  // each rank of the group contributes in the second step (its column's blocks).
  chunk.step_counts.assign(groups + G, 0);
  std::size_t staged = 0;
  for (std::uint32_t h = 0; h < groups; ++h) {
    chunk.step_counts[h] = counts[h * G + local];
    staged += chunk.step_counts[h];
  }
  for (std::uint32_t j = 0; j < n; ++j) chunk.step_counts[groups + j % G] += counts[j];
  chunk.staged.resize(staged);
  chunk.request = column_->iallgatherv<std::uint8_t>(
      mine, std::span<const std::size_t>(chunk.step_counts.data(), groups), chunk.staged);
}

void ZenGroups::wait_pull(Communicator& comm, PullChunk& chunk) {
  if (resolve(comm) == 1) return comm.wait(chunk.request);
  const std::uint32_t groups = static_cast<std::uint32_t>(comm.size()) / group_;
  column_->wait(chunk.request);
  chunk.request = node_->iallgatherv<std::uint8_t>(
      chunk.staged, std::span<const std::size_t>(chunk.step_counts.data() + groups, group_),
      chunk.recv);
  node_->wait(chunk.request);
  report_traffic(comm);
}

void ZenGroups::progress_pull(Communicator& comm, PullChunk& chunk) {
  if (resolve(comm) == 1) return comm.progress(chunk.request);
  column_->progress(chunk.request);
}

#define ATOLL_ZEN_PUSH_INSTANTIATE(I)                                                     \
  template void ZenGroups::push(Communicator&, HashPartition<I>&, std::vector<Entry<I>>&, \
                                std::vector<std::size_t>&);
ATOLL_ZEN_PUSH_INSTANTIATE(std::uint32_t)
ATOLL_ZEN_PUSH_INSTANTIATE(std::uint64_t)
#undef ATOLL_ZEN_PUSH_INSTANTIATE

}  // namespace atl::sync
