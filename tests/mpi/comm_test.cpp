// The communicator layer under mpirun (world sizes 1, 2, 3, 5) and smpirun (16 ranks; the
// Exchange tests also at 3, 5, 6 and 7): sub-communicators (split), the personalised exchanges
// (alltoall, alltoallv) and the non-blocking operations (iallreduce, ireduce_scatter, iallgather
// beside iallgatherv) against blocking MPI and against references every rank computes itself from
// the rank-unique fills. Integer-valued floats keep every sum exact, so results are
// compared bit for bit. A fatal failure (ASSERT_*) on one rank ends the whole job (see main()).
// DISABLED_IallreduceVsAllreduceTime prints simulated times; it asserts nothing about them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/comm/watchdog.h"
#include "atoll/sparse/generator.h"
#include "atoll/sync/scheme.h"
#include "mpi_test_main.h"

namespace {

using namespace atl;
using comm::Communicator;
using comm::ReduceOp;
using comm::Request;
using comm::TrafficCounters;

Communicator* g_comm = nullptr;

const std::vector<std::size_t> kSizes = {0, 1, 4, 100, 1000, 10007};

// Rank r's value at element i: distinct per rank and integer-valued (exact in float sums).
template <class T>
T fill_value(int rank, std::size_t i) {
  return static_cast<T>((rank + 1) * static_cast<int>(i % 97) + 3 * rank + 1);
}
template <class T>
std::vector<T> filled(int rank, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = fill_value<T>(rank, i);
  return v;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TrafficCounters delta(const TrafficCounters& before, const TrafficCounters& after) {
  return {after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received};
}

// iallreduce's documented traffic each way: B + (n-2)·b_rank (0 alone).
std::uint64_t iallreduce_bytes(std::size_t count, std::size_t elem, int rank, int n) {
  if (n == 1) return 0;
  const std::size_t mine = count / n + (static_cast<std::size_t>(rank) < count % n ? 1 : 0);
  return (count + (n - 2) * mine) * elem;
}

// iallreduce on `comm` equals blocking allreduce bit for bit, for every size, with the documented
// traffic.
template <class T>
void check_iallreduce(Communicator& comm, ReduceOp op, const std::string& label) {
  for (std::size_t count : kSizes) {
    auto blocking = filled<T>(comm.rank(), count);
    auto nonblocking = blocking;
    comm.allreduce<T>(blocking, op);
    const auto before = comm.traffic();
    Request r = comm.iallreduce<T>(nonblocking, op);
    EXPECT_TRUE(r.active());
    comm.wait(r);
    EXPECT_FALSE(r.active());
    EXPECT_TRUE(bitwise_equal(blocking, nonblocking))
        << label << " count " << count << " rank " << comm.rank() << " of " << comm.size();
    const auto d = delta(before, comm.traffic());
    const auto bytes = iallreduce_bytes(count, sizeof(T), comm.rank(), comm.size());
    EXPECT_EQ(d.bytes_sent, bytes) << label << " count " << count;
    EXPECT_EQ(d.bytes_received, bytes) << label << " count " << count;
  }
}

void check_all_iallreduce(Communicator& comm) {
  check_iallreduce<float>(comm, ReduceOp::sum, "float sum");
  check_iallreduce<double>(comm, ReduceOp::sum, "double sum");
  check_iallreduce<std::int32_t>(comm, ReduceOp::sum, "i32 sum");
  check_iallreduce<std::uint64_t>(comm, ReduceOp::sum, "u64 sum");
  check_iallreduce<float>(comm, ReduceOp::min, "float min");
  check_iallreduce<double>(comm, ReduceOp::max, "double max");
  check_iallreduce<std::uint32_t>(comm, ReduceOp::bit_or, "u32 bit_or");
}

// Block counts for a reduce-scatter over n ranks: some empty, some larger than others.
std::vector<std::size_t> uneven_counts(int n, std::size_t scale) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) counts[q] = (q % 3 == 1) ? 0 : scale * (q + 1) + q % 2;
  return counts;
}

void check_ireduce_scatter(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  for (std::size_t scale : {0, 1, 37, 1000}) {
    const auto counts = uneven_counts(n, scale);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::size_t offset = 0;
    for (int q = 0; q < me; ++q) offset += counts[q];
    const auto send = filled<float>(me, total);
    std::vector<float> recv(counts[me], -1.0f), expected(counts[me], 0.0f);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < counts[me]; ++i) expected[i] += fill_value<float>(r, offset + i);
    const auto before = comm.traffic();
    Request req = comm.ireduce_scatter<float>(send, counts, recv, ReduceOp::sum);
    comm.wait(req);
    EXPECT_TRUE(bitwise_equal(recv, expected)) << "scale " << scale << " rank " << me;
    const auto d = delta(before, comm.traffic());
    EXPECT_EQ(d.bytes_sent, n == 1 ? 0 : (total - counts[me]) * sizeof(float));
    EXPECT_EQ(d.bytes_received, (n - 1) * counts[me] * sizeof(float));
  }
  // In place: recv is this rank's block of the send buffer.
  const auto counts = uneven_counts(n, 5);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::size_t offset = 0;
  for (int q = 0; q < me; ++q) offset += counts[q];
  auto buffer = filled<std::int64_t>(me, total);
  std::span<std::int64_t> mine(buffer.data() + offset, counts[me]);
  Request req = comm.ireduce_scatter<std::int64_t>(buffer, counts, mine, ReduceOp::max);
  comm.wait(req);
  for (std::size_t i = 0; i < counts[me]; ++i)
    EXPECT_EQ(mine[i], fill_value<std::int64_t>(n - 1, offset + i)) << "in place, element " << i;
}

void check_iallgather(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  for (std::size_t count : {0, 1, 100, 1000}) {
    const auto send = filled<double>(me, count);
    std::vector<double> recv(count * n, -1.0), expected;
    for (int r = 0; r < n; ++r) {
      const auto block = filled<double>(r, count);
      expected.insert(expected.end(), block.begin(), block.end());
    }
    const auto before = comm.traffic();
    Request req = comm.iallgather<double>(send, recv);
    comm.wait(req);
    EXPECT_TRUE(bitwise_equal(recv, expected)) << "count " << count << " rank " << me;
    const auto d = delta(before, comm.traffic());
    EXPECT_EQ(d.bytes_sent, (n - 1) * count * sizeof(double));
    EXPECT_EQ(d.bytes_received, (n - 1) * count * sizeof(double));
  }
  // In place (send is this rank's block of recv), a struct element type.
  struct Pair {
    std::int32_t a;
    float b;
  };
  std::vector<Pair> all(3 * n, Pair{-1, -1.0f});
  for (int k = 0; k < 3; ++k) all[3 * me + k] = Pair{me * 10 + k, float(me)};
  Request req = comm.iallgather<Pair>(std::span<const Pair>(all.data() + 3 * me, 3), all);
  comm.wait(req);
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(all[3 * r + k].a, r * 10 + k);
      EXPECT_EQ(all[3 * r + k].b, float(r));
    }
}

// Several operations in flight at once, completed in an order that differs between ranks (odd
// ranks reversed), with progress() on some in between: every request matches its own messages.
void check_many_in_flight(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  std::vector<std::vector<float>> data, expected;
  for (std::size_t count : {10007, 1, 0, 4096, 100}) {
    data.push_back(filled<float>(me, count));
    auto ref = data.back();
    comm.allreduce<float>(ref, ReduceOp::sum);
    expected.push_back(std::move(ref));
  }
  const auto gather_send = filled<std::int32_t>(me, 50);
  std::vector<std::int32_t> gathered(50 * n);
  std::vector<std::size_t> v_counts(n);
  for (int r = 0; r < n; ++r) v_counts[r] = static_cast<std::size_t>(r % 4);
  const auto v_send = filled<std::uint8_t>(me, v_counts[me]);
  std::vector<std::uint8_t> v_recv(std::accumulate(v_counts.begin(), v_counts.end(), 0ul));

  const auto before = comm.traffic();
  std::vector<Request> requests;
  for (auto& d : data) requests.push_back(comm.iallreduce<float>(d, ReduceOp::sum));
  requests.push_back(comm.iallgather<std::int32_t>(gather_send, gathered));
  requests.push_back(comm.iallgatherv<std::uint8_t>(v_send, v_counts, v_recv));
  if (me % 2) std::reverse(requests.begin(), requests.end());
  for (std::size_t k = 0; k < requests.size(); ++k) {
    if (k + 1 < requests.size()) comm.progress(requests[k + 1]);
    comm.wait(requests[k]);
  }
  for (std::size_t k = 0; k < data.size(); ++k)
    EXPECT_TRUE(bitwise_equal(data[k], expected[k])) << "request " << k << " rank " << me;
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 50; ++i)
      EXPECT_EQ(gathered[50 * r + i], fill_value<std::int32_t>(r, i));
  std::size_t pos = 0;
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < v_counts[r]; ++i, ++pos)
      EXPECT_EQ(v_recv[pos], fill_value<std::uint8_t>(r, i));
  // Traffic adds up: the sum over requests of each one's documented bytes.
  std::uint64_t bytes = 0;
  for (const auto& d : data) bytes += iallreduce_bytes(d.size(), sizeof(float), me, n);
  bytes += (n - 1) * 50 * sizeof(std::int32_t);
  const auto d = delta(before, comm.traffic());
  const std::size_t v_total = v_recv.size();
  EXPECT_EQ(d.bytes_sent, bytes + (n > 1 ? v_total - v_counts[(me + 1) % n] : 0));
  EXPECT_EQ(d.bytes_received, bytes + (n > 1 ? v_total - v_counts[me] : 0));
}

void check_progress_then_wait(Communicator& comm) {
  auto data = filled<double>(comm.rank(), 100000);
  auto expected = data;
  comm.allreduce<double>(expected, ReduceOp::sum);
  Request r = comm.iallreduce<double>(data, ReduceOp::sum);
  // Progress may complete the request (then wait() has nothing left to do) or not.
  for (int k = 0; k < 50 && r.active(); ++k) comm.progress(r);
  comm.wait(r);
  EXPECT_FALSE(r.active());
  EXPECT_TRUE(bitwise_equal(data, expected));
  const auto before = comm.traffic();
  comm.wait(r);  // inactive: nothing happens
  comm.progress(r);
  Request never_posted;
  EXPECT_FALSE(never_posted.active());
  comm.wait(never_posted);
  comm.progress(never_posted);
  EXPECT_EQ(comm.traffic().bytes_sent, before.bytes_sent);
  EXPECT_EQ(comm.traffic().bytes_received, before.bytes_received);
}

// advance_stages (a model unit's boundary in DDP's backward overlap) with several requests in
// flight, a different number of times on each rank: every result still equals the blocking
// allreduce's with the documented traffic; with nothing in flight it does nothing.
void check_advance_stages(Communicator& comm) {
  const auto before_idle = comm.traffic();
  comm.advance_stages();
  EXPECT_EQ(comm.traffic().bytes_sent, before_idle.bytes_sent);
  std::vector<std::vector<float>> data, expected;
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{100003}}) {
    data.push_back(filled<float>(comm.rank(), count));
    expected.push_back(data.back());
    comm.allreduce<float>(expected.back(), ReduceOp::sum);
  }
  const auto before = comm.traffic();
  std::vector<Request> requests;
  for (auto& d : data) {
    requests.push_back(comm.iallreduce<float>(d, ReduceOp::sum));
    for (int k = 0; k <= comm.rank() % 3; ++k) comm.advance_stages();
  }
  for (auto& r : requests) comm.wait(r);
  std::uint64_t bytes = 0;
  for (std::size_t k = 0; k < data.size(); ++k) {
    EXPECT_TRUE(bitwise_equal(data[k], expected[k])) << "request " << k << " rank " << comm.rank();
    bytes += iallreduce_bytes(data[k].size(), sizeof(float), comm.rank(), comm.size());
  }
  EXPECT_EQ(delta(before, comm.traffic()).bytes_sent, bytes);
}

// Even ranks run a blocking collective between post and wait, odd ranks wait first: blocking
// operations post the stages still to post, so the odd ranks' wait() can finish.
void check_blocking_before_wait(Communicator& comm) {
  const int me = comm.rank();
  auto data = filled<float>(me, 3001);
  auto expected = data;
  comm.allreduce<float>(expected, ReduceOp::sum);
  Request r = comm.iallreduce<float>(data, ReduceOp::sum);
  std::int32_t ranks = 0;
  if (me % 2 == 0) {
    ranks = comm.allreduce_value<std::int32_t>(1, ReduceOp::sum);
    comm.wait(r);
  } else {
    comm.wait(r);
    ranks = comm.allreduce_value<std::int32_t>(1, ReduceOp::sum);
  }
  EXPECT_EQ(ranks, comm.size());
  EXPECT_TRUE(bitwise_equal(data, expected));
}

// A request dropped (destroyed, move-assigned over) before wait() still completes on every rank.
void check_abandoned_requests(Communicator& comm) {
  auto a = filled<float>(comm.rank(), 1000);
  auto b = a, expected = a;
  comm.allreduce<float>(expected, ReduceOp::sum);
  { Request r = comm.iallreduce<float>(a, ReduceOp::sum); }
  Request r = comm.iallreduce<float>(b, ReduceOp::sum);
  r = Request();
  EXPECT_TRUE(bitwise_equal(a, expected));
  EXPECT_TRUE(bitwise_equal(b, expected));
  comm.barrier();
}

// Elements rank `from` sends to rank `to` in the alltoallv checks: different for every pair, none
// for about a quarter of the pairs (the self block included, on some ranks).
std::size_t exchange_count(std::size_t base, int from, int to) {
  if (base == 0 || (from * 7 + to * 3) % 4 == 0) return 0;
  return base + static_cast<std::size_t>(from + 2 * to);
}
std::int64_t exchange_value(int from, int to, std::size_t i) {
  return (std::int64_t{from} * 1000 + to) * 1000003 + static_cast<std::int64_t>(i);
}

// alltoallv delivers every block where the receive counts say, with the documented traffic.
void check_alltoallv(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  for (std::size_t base : {0, 1, 100, 10007}) {
    std::vector<std::size_t> send_counts(n), recv_counts(n);
    std::vector<std::int64_t> send, expected;
    std::uint64_t bytes_sent = 0, bytes_received = 0;
    for (int q = 0; q < n; ++q) {
      send_counts[q] = exchange_count(base, me, q);
      recv_counts[q] = exchange_count(base, q, me);
      for (std::size_t i = 0; i < send_counts[q]; ++i) send.push_back(exchange_value(me, q, i));
      for (std::size_t i = 0; i < recv_counts[q]; ++i) expected.push_back(exchange_value(q, me, i));
      if (q == me) continue;
      bytes_sent += send_counts[q] * sizeof(std::int64_t);
      bytes_received += recv_counts[q] * sizeof(std::int64_t);
    }
    std::vector<std::int64_t> recv(expected.size(), -1);
    const auto before = comm.traffic();
    comm.alltoallv<std::int64_t>(send, send_counts, recv, recv_counts);
    EXPECT_TRUE(bitwise_equal(recv, expected)) << "base " << base << " rank " << me;
    const auto d = delta(before, comm.traffic());
    EXPECT_EQ(d.bytes_sent, bytes_sent) << "base " << base;
    EXPECT_EQ(d.bytes_received, bytes_received) << "base " << base;
  }
}

// alltoall of blocks of kWords 32-bit words: block q of rank r's result is rank q's block r.
template <std::size_t kWords>
void check_alltoall_blocks(Communicator& comm) {
  struct Block {
    std::uint32_t word[kWords];
  };
  const int n = comm.size(), me = comm.rank();
  const auto value = [](int from, int to, std::size_t w) {
    return static_cast<std::uint32_t>((from * 131 + to) * 7919 + w);
  };
  std::vector<Block> send(n);
  for (int q = 0; q < n; ++q)
    for (std::size_t w = 0; w < kWords; ++w) send[q].word[w] = value(me, q, w);
  const auto before = comm.traffic();
  const auto recv = comm.alltoall<Block>(send);
  const auto d = delta(before, comm.traffic());
  ASSERT_EQ(recv.size(), static_cast<std::size_t>(n));
  std::size_t bad = 0;
  for (int q = 0; q < n; ++q)
    for (std::size_t w = 0; w < kWords; ++w) bad += recv[q].word[w] != value(q, me, w);
  EXPECT_EQ(bad, 0u) << sizeof(Block) << "-byte blocks, rank " << me;
  EXPECT_EQ(d.bytes_sent, (n - 1) * sizeof(Block));
  EXPECT_EQ(d.bytes_received, (n - 1) * sizeof(Block));
}

// The personalised exchanges at every world size. Under SMPI the library's own algorithm can refuse
// some sizes (SimGrid 3.32's `pair`: alltoallv at 3 ranks, alltoall of 512 KiB - 1 MiB blocks at 3
// to 7 ranks); the communicator must not.
TEST(Exchange, AlltoallvMatchesReference) { check_alltoallv(*g_comm); }
TEST(Exchange, AlltoallOfSmallMediumAndLargeBlocks) {
  check_alltoall_blocks<2>(*g_comm);           // 8 bytes (Zen's counts)
  check_alltoall_blocks<750>(*g_comm);         // 3000 bytes
  check_alltoall_blocks<150 * 1024>(*g_comm);  // 600 KiB
}
// Messages of a request in flight and of the exchange do not mix (even ranks wait first).
TEST(Exchange, AlltoallvBesideRequestInFlight) {
  Communicator& comm = *g_comm;
  auto data = filled<float>(comm.rank(), 3001);
  auto expected = data;
  comm.allreduce<float>(expected, ReduceOp::sum);
  Request r = comm.iallreduce<float>(data, ReduceOp::sum);
  if (comm.rank() % 2 == 0) comm.wait(r);
  check_alltoallv(comm);
  comm.wait(r);
  EXPECT_TRUE(bitwise_equal(data, expected));
}

// The library's other blocking collectives at sizes that reach its different algorithms.
TEST(Exchange, BlockingCollectivesAtManySizes) {
  Communicator& comm = *g_comm;
  const int n = comm.size(), me = comm.rank();
  for (std::size_t count : {1, 3000, 300000}) {
    auto data = filled<float>(me, count);
    comm.allreduce<float>(data, ReduceOp::sum);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += fill_value<float>(r, i);
      bad += data[i] != sum;
    }
    EXPECT_EQ(bad, 0u) << "allreduce of " << count;

    // Blocks of count / (r + 1) elements from rank r (count 1: rank 0's only).
    const auto mine = filled<std::int32_t>(me, count / (me + 1));
    std::vector<std::size_t> counts;
    const auto all = comm.allgatherv<std::int32_t>(mine, &counts);
    std::vector<std::int32_t> expected;
    for (int r = 0; r < n; ++r) {
      const auto block = filled<std::int32_t>(r, count / (r + 1));
      expected.insert(expected.end(), block.begin(), block.end());
    }
    EXPECT_TRUE(bitwise_equal(all, expected)) << "allgatherv of " << count;

    const auto each = comm.allgather_each<std::int32_t>(filled<std::int32_t>(me, count));
    std::size_t bad_each = 0;
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        bad_each += each[r * count + i] != fill_value<std::int32_t>(r, i);
    EXPECT_EQ(bad_each, 0u) << "allgather of " << count;

    auto broadcast = filled<std::int32_t>(me, count);
    comm.broadcast<std::int32_t>(broadcast, n - 1);
    EXPECT_TRUE(bitwise_equal(broadcast, filled<std::int32_t>(n - 1, count)))
        << "broadcast of " << count;
  }
}

// The two halves of the world, first half one rank larger for odd sizes (5 -> 3 + 2).
Communicator split_halves(Communicator& world) {
  const int first = (world.size() + 1) / 2;
  return world.split(world.rank() < first ? 0 : 1, world.rank());
}

TEST(Split, ColorsKeysAndOrder) {
  Communicator& world = *g_comm;
  const int n = world.size(), me = world.rank();
  const int colors = std::min(n, 3);
  // Keys reverse the order inside a color.
  Communicator sub = world.split(me % colors, n - me);
  std::vector<int> members;
  for (int r = n - 1; r >= 0; --r)
    if (r % colors == me % colors) members.push_back(r);
  ASSERT_EQ(sub.size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[sub.rank()], me);
  EXPECT_EQ(sub.allgather<std::int32_t>(me),
            std::vector<std::int32_t>(members.begin(), members.end()));
  EXPECT_GE(sub.ranks_on_node(), 1);
  EXPECT_LE(sub.ranks_on_node(), sub.size());
  if (world.ranks_on_node() == world.size()) {
    EXPECT_EQ(sub.ranks_on_node(), sub.size());
  }
  // Equal keys: the order of this communicator.
  Communicator same_key = world.split(0, 7);
  EXPECT_EQ(same_key.rank(), me);
  EXPECT_EQ(same_key.size(), n);
}

TEST(Split, TrafficIsPerCommunicator) {
  Communicator& world = *g_comm;
  Communicator sub = split_halves(world);
  const auto world_before = world.traffic();
  EXPECT_EQ(sub.traffic().bytes_sent, 0u);
  std::vector<float> v(1000, 1.0f);
  sub.allreduce<float>(v, ReduceOp::sum);
  EXPECT_EQ(v[0], float(sub.size()));
  EXPECT_EQ(world.traffic().bytes_sent, world_before.bytes_sent);
  EXPECT_EQ(world.traffic().bytes_received, world_before.bytes_received);
  if (sub.size() > 1) {
    EXPECT_GT(sub.traffic().bytes_sent, 0u);
  }
}

TEST(Split, ColorOfOneRank) {
  Communicator& world = *g_comm;
  const int last = world.size() - 1;
  Communicator sub = world.split(world.rank() == last ? 1 : 0, 0);
  EXPECT_EQ(sub.size(), world.rank() == last ? 1 : world.size() - 1);
  check_iallreduce<float>(sub, ReduceOp::sum, "alone or the rest");
}

TEST(Split, ManySplitsAreFreed) {
  // Each split is freed on destruction (or when moved over); thousands would exhaust MPI's
  // communicator ids otherwise. Also a split of a split.
  Communicator& world = *g_comm;
  Communicator kept = split_halves(world);
  for (int k = 0; k < 300; ++k) {
    Communicator sub = world.split(world.rank() % 2, k);
    if (k % 3 == 0) kept = std::move(sub);
  }
  Communicator nested = kept.split(0, kept.rank());
  EXPECT_EQ(nested.size(), kept.size());
  EXPECT_EQ(nested.allreduce_value<std::int32_t>(1, ReduceOp::sum), kept.size());
}

TEST(Split, NegativeColorFailsOnEveryRank) {
  Communicator& world = *g_comm;
  const int color = world.rank() == world.size() - 1 ? -1 : 0;
  try {
    Communicator sub = world.split(color, 0);
    ADD_FAILURE() << "no error on rank " << world.rank();
  } catch (const comm::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("color -1"), std::string::npos) << e.what();
  }
}

// The pipelined ring: the same sums as allreduce (integer-valued data: exact in any order) at
// every size (empty, fewer elements than ranks, not divisible), on every rank, with max and min
// too; traffic 2(n−1)/n of the buffer when n divides it; a sub-communicator's ring in its order.
template <class T>
void check_ring_allreduce(Communicator& comm, ReduceOp op) {
  for (std::size_t count : kSizes) {
    auto expected = filled<T>(comm.rank(), count);
    auto ring = expected;
    comm.allreduce<T>(expected, op);
    const auto before = comm.traffic();
    comm.ring_allreduce<T>(ring, op);
    EXPECT_TRUE(bitwise_equal(expected, ring)) << "count " << count << " rank " << comm.rank();
    const auto n = static_cast<std::size_t>(comm.size());
    if (n > 1 && count % n == 0) {
      EXPECT_EQ(delta(before, comm.traffic()).bytes_sent, 2 * (n - 1) * count / n * sizeof(T));
    }
  }
}
TEST(Ring, RingAllreduceMatchesAllreduce) {
  check_ring_allreduce<float>(*g_comm, ReduceOp::sum);
  check_ring_allreduce<double>(*g_comm, ReduceOp::max);
  check_ring_allreduce<std::int64_t>(*g_comm, ReduceOp::min);
  auto odd = g_comm->split(g_comm->rank() % 2, -g_comm->rank());  // reversed order
  check_ring_allreduce<float>(odd, ReduceOp::sum);
}

TEST(NonBlocking, IallreduceMatchesAllreduce) { check_all_iallreduce(*g_comm); }
TEST(NonBlocking, IreduceScatterMatchesReference) { check_ireduce_scatter(*g_comm); }
TEST(NonBlocking, IallgatherMatchesReference) { check_iallgather(*g_comm); }

// The small agreements sent to every peer at once (allgather_each_direct, allreduce_direct):
// the same values as MPI's allgather and allreduce, each rank's in rank order, and the sums
// combined in rank order on every rank (the same bits everywhere), on the world and on a split.
void check_direct(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const std::vector<std::uint64_t> mine{std::uint64_t(me) * 7 + 1, ~std::uint64_t(me), 5};
  EXPECT_EQ(comm.allgather_each_direct<std::uint64_t>(mine),
            comm.allgather_each<std::uint64_t>(mine));
  EXPECT_EQ(comm.allgather_direct(me + 0.5), comm.allgather(me + 0.5));
  for (auto op : {ReduceOp::max, ReduceOp::min, ReduceOp::sum, ReduceOp::bit_or}) {
    std::vector<std::uint64_t> a(mine), b(mine);
    comm.allreduce_direct<std::uint64_t>(a, op);
    comm.allreduce<std::uint64_t>(b, op);
    EXPECT_EQ(a, b) << static_cast<int>(op);
  }
  std::vector<double> x{0.1 * (me + 1), -1.0 / (me + 3), 1e16 * (me % 2 ? 1 : -1)};
  std::vector<double> sum(x), expect(x.size(), 0.0);
  comm.allreduce_direct<double>(sum, ReduceOp::sum);
  for (int r = 0; r < n; ++r) {
    const std::vector<double> xr{0.1 * (r + 1), -1.0 / (r + 3), 1e16 * (r % 2 ? 1 : -1)};
    for (std::size_t i = 0; i < x.size(); ++i) expect[i] = r == 0 ? xr[i] : expect[i] + xr[i];
  }
  if (n > Communicator::kDirectRanks) return;  // MPI's allreduce then, in its own order
  EXPECT_EQ(sum, expect);                      // bit for bit: rank order, on every rank
  std::vector<double> bad{1.0};
  EXPECT_THROW(comm.allreduce_direct<double>(bad, ReduceOp::bit_or), std::invalid_argument);
}
TEST(Direct, SmallAgreementsMatchMpi) {
  check_direct(*g_comm);
  Communicator sub = g_comm->split(g_comm->rank() % 2, g_comm->rank());
  check_direct(sub);
}
TEST(NonBlocking, ManyInFlightCompletedInAnyOrder) { check_many_in_flight(*g_comm); }
TEST(NonBlocking, ProgressThenWaitAndInactiveRequests) { check_progress_then_wait(*g_comm); }
TEST(NonBlocking, AbandonedRequestsComplete) { check_abandoned_requests(*g_comm); }
TEST(NonBlocking, BlockingOperationBeforeWait) { check_blocking_before_wait(*g_comm); }
TEST(NonBlocking, AdvanceStagesWithRequestsInFlight) { check_advance_stages(*g_comm); }

TEST(NonBlocking, CountMismatchIsAnError) {
  Communicator& comm = *g_comm;
  std::vector<float> send(3), recv(2);
  std::vector<std::size_t> counts(comm.size() + 1, 1);
  EXPECT_THROW(comm.ireduce_scatter<float>(send, counts, recv, ReduceOp::sum), comm::CommError);
  EXPECT_THROW(comm.iallgather<float>(std::span<const float>(send), recv), comm::CommError);
}

TEST(SubCommunicator, RequestOfAnotherCommunicatorIsRefused) {
  Communicator& world = *g_comm;
  Communicator sub = split_halves(world);
  auto data = filled<float>(world.rank(), 10);
  Request r = sub.iallreduce<float>(data, ReduceOp::sum);
  EXPECT_THROW(world.wait(r), comm::CommError);
  EXPECT_TRUE(r.active());
  sub.wait(r);
  EXPECT_FALSE(r.active());
}

TEST(SubCommunicator, NonBlockingOperations) {
  Communicator sub = split_halves(*g_comm);
  check_all_iallreduce(sub);
  check_ireduce_scatter(sub);
  check_iallgather(sub);
  check_many_in_flight(sub);
  check_progress_then_wait(sub);
  check_blocking_before_wait(sub);
  check_abandoned_requests(sub);
}

// Both halves at once, interleaved with world operations: tags and contexts keep them apart.
TEST(SubCommunicator, InFlightBesideWorld) {
  Communicator& world = *g_comm;
  Communicator sub = split_halves(world);
  auto w = filled<float>(world.rank(), 5000), s = filled<float>(world.rank(), 5000);
  auto w_ref = w, s_ref = s;
  world.allreduce<float>(w_ref, ReduceOp::sum);
  sub.allreduce<float>(s_ref, ReduceOp::sum);
  Request rw = world.iallreduce<float>(w, ReduceOp::sum);
  Request rs = sub.iallreduce<float>(s, ReduceOp::sum);
  sub.wait(rs);
  world.wait(rw);
  EXPECT_TRUE(bitwise_equal(w, w_ref));
  EXPECT_TRUE(bitwise_equal(s, s_ref));
}

// Every scheme on both halves of the world (5 ranks: 3 + 2), one instance per communicator,
// against the members' summed gradients (each rank regenerates them, as the golden test does).
class SchemeOnHalves : public ::testing::TestWithParam<std::string> {};

TEST_P(SchemeOnHalves, ExactSumOfMembers) {
  Communicator& world = *g_comm;
  Communicator sub = split_halves(world);
  const int first = (world.size() + 1) / 2;
  const int lo = world.rank() < first ? 0 : first;
  const int hi = world.rank() < first ? first : world.size();
  for (double density : {0.001, 0.05, 0.5}) {
    const sparse::GeneratorOptions o{10007, density, 1.1, 21, sparse::ValueKind::integer};
    std::vector<double> ref(o.elements, 0.0);
    for (int r = lo; r < hi; ++r) {
      const auto g = sparse::generate_gradient<std::uint32_t>(o, r);
      for (std::size_t k = 0; k < g.nnz(); ++k) ref[g.indices[k]] += g.values[k];
    }
    const auto mine = sparse::generate_gradient<std::uint32_t>(o, world.rank());
    auto scheme = sync::make_scheme(GetParam());
    sync::SyncResult<std::uint32_t> out;
    for (int call = 0; call < 2; ++call) {
      scheme->synchronize(sub, mine, out);
      const auto got = out.to_dense();
      ASSERT_EQ(got.size(), ref.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        if (got[i] != ref[i] && bad++ < 3) {
          ADD_FAILURE() << GetParam() << " d=" << density << " world rank " << world.rank()
                        << ": element " << i << " = " << got[i] << ", expected " << ref[i];
        }
      }
      EXPECT_EQ(bad, 0u);
      const auto sums = sub.allgather<std::uint64_t>(out.checksum());
      for (std::size_t r = 1; r < sums.size(); ++r) EXPECT_EQ(sums[r], sums[0]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, SchemeOnHalves, ::testing::ValuesIn(sync::scheme_names()),
                         [](const auto& info) { return info.param; });

// Measurement, not a test (run with --gtest_also_run_disabled_tests under scripts/simulate):
// seconds from post to completion of iallreduce against blocking allreduce, slowest rank, float
// sums of 1, 16 and 64 MiB. Prints one line per size on rank 0.
TEST(Timing, DISABLED_IallreduceVsAllreduceTime) {
  Communicator& comm = *g_comm;
  for (std::size_t mib : {1, 16, 64}) {
    const std::size_t count = mib * (std::size_t{1} << 20) / sizeof(float);
    std::vector<float> data(count, 1.0f);
    double best_blocking = 1e30, best_nonblocking = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      comm.barrier();
      double t0 = comm.wtime();
      comm.allreduce<float>(data, ReduceOp::sum);
      const double blocking = comm.allreduce_value(comm.wtime() - t0, ReduceOp::max);
      comm.barrier();
      t0 = comm.wtime();
      Request r = comm.iallreduce<float>(data, ReduceOp::sum);
      comm.wait(r);
      double nonblocking = comm.allreduce_value(comm.wtime() - t0, ReduceOp::max);
      best_blocking = std::min(best_blocking, blocking);
      best_nonblocking = std::min(best_nonblocking, nonblocking);
      // Its two stages alone.
      const auto counts = std::vector<std::size_t>(comm.size(), count / comm.size());
      std::vector<float> block(counts[0]);
      comm.barrier();
      t0 = comm.wtime();
      r = comm.ireduce_scatter<float>(std::span<const float>(data.data(), counts[0] * comm.size()),
                                      counts, block, ReduceOp::sum);
      comm.wait(r);
      const double rs = comm.allreduce_value(comm.wtime() - t0, ReduceOp::max);
      comm.barrier();
      t0 = comm.wtime();
      r = comm.iallgather<float>(block, std::span<float>(data.data(), counts[0] * comm.size()));
      comm.wait(r);
      const double ag = comm.allreduce_value(comm.wtime() - t0, ReduceOp::max);
      if (comm.rank() == 0 && rep == 1) {
        std::printf("  stages %zu MiB: ireduce_scatter %.3f ms, iallgather %.3f ms\n", mib,
                    rs * 1e3, ag * 1e3);
      }
    }
    if (comm.rank() == 0) {
      std::printf("allreduce %3zu MiB n=%d: blocking %.3f ms, iallreduce %.3f ms (%.2fx)\n", mib,
                  comm.size(), best_blocking * 1e3, best_nonblocking * 1e3,
                  best_nonblocking / best_blocking);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The watchdog on, as atoll train and bench sync have it by default: its thread runs beside
  // every operation here (the ThreadSanitizer run of docs/results/reliability.md checks the pair).
  atl::comm::set_comm_timeout(120);
  return atl::testing::run_mpi_tests(argc, argv, g_comm);
}
