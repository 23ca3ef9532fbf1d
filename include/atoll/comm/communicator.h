// The communicator layer: the only way atoll code talks to the distributed engine.
//
// One implementation (src/comm/communicator*.cpp and mpi_helpers.cpp) is compiled twice: against
// Open MPI for build/atoll and against SimGrid SMPI for build/atoll-smpi. Nothing else includes
// <mpi.h>, so the synchronization schemes run unchanged on a real cluster and on a simulated one.
//
// Contracts:
// - Every operation is collective over the communicator unless it says otherwise; all ranks must
//   call it with matching sizes (alltoallv receive counts must equal the peers' send counts).
// - MPI failures become CommError naming the rank and the operation.
// - Traffic is metered per rank and per communicator (see TrafficCounters) so schemes can report
//   bytes per phase.
// - Non-blocking operations return a Request (one type for all of them), completed by wait().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace atl::comm {

// A recoverable failure of the distributed engine or of a peer (message names rank and op).
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error that every rank agreed on (see Communicator::agree): thrown on all ranks at once.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DataType { u8, i32, u32, i64, u64, f32, f64 };
enum class ReduceOp { sum, min, max, bit_or };

template <class T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, std::uint8_t>)
    return DataType::u8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::i32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return DataType::u32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DataType::i64;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return DataType::u64;
  else if constexpr (std::is_same_v<T, float>)
    return DataType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::f64;
  else
    static_assert(sizeof(T) == 0, "unsupported element type");
}

// Bytes this rank put on / took off the network (self-copies excluded). For collectives whose
// internal algorithm belongs to the MPI library, the bytes of the bandwidth-optimal algorithm are
// counted: ring allreduce 2(n-1)/n·B each way, ring allgatherv (total − own) received.
struct TrafficCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

class Communicator;
struct CpuCharging;  // cpu_costs.h

// A non-blocking operation in flight (iallgatherv, iallgather, ireduce_scatter, iallreduce). It
// owns what the operation needs until it completes: the MPI requests of its current stage, any
// count arrays and scratch space, the stage still to post (iallreduce has two) and the traffic to
// add to its communicator's counters on completion. Complete it with Communicator::wait (or see it
// complete in Communicator::progress) before touching its buffers. Destroying an incomplete request
// (or its communicator) completes it, every stage, without throwing (MPI forbids freeing a pending
// collective, and peers would wait for a stage never posted), so buffers are never released under
// the library; its traffic is then not counted.
class Request {
 public:
  Request();
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  // False once complete (or default-constructed): wait() and progress() are then no-ops.
  bool active() const { return state_ != nullptr; }

 private:
  friend class Communicator;
  struct State;
  std::unique_ptr<State> state_;
};

class Communicator {
 public:
  // The world communicator of an initialised MPI runtime (see MpiRuntime). Collective over the
  // world (it counts the ranks on this node): make it once.
  static Communicator world();
  // Sub-communicators (MPI_Comm_split), collective over this communicator: the ranks that pass the
  // same `color` (>= 0) form one communicator, ranked by `key` (ties: by rank here). A negative
  // color on any rank throws CollectiveError on every rank. The result owns its MPI_Comm (freed on
  // destruction; world's never is), returns errors as codes like world() (CommError naming rank
  // and op), computes its own ranks_on_node() and meters its own traffic (this communicator's
  // counters do not see it). Any scheme runs on it unchanged (one scheme instance per
  // communicator: schemes cache state sized for their communicator).
  Communicator split(int color, int key);
  // The communicator of the listed ranks of this one (MPI_Comm_create_group), in that order:
  // collective over those ranks only (a torch process group made by dist.new_group is built by
  // its members alone). This rank must be listed; ranks in range and distinct
  // (std::invalid_argument otherwise, before any MPI call). Owns its MPI_Comm, as split()'s results
  // do.
  Communicator subgroup(std::span<const int> ranks);
  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks of this communicator that share this rank's node, and so its memory (all of them under
  // SMPI, where every simulated rank lives in one process).
  int ranks_on_node() const { return ranks_on_node_; }

  // Seconds on the engine's clock: wall time under Open MPI, simulated time under SMPI.
  double wtime() const;
  void barrier();

  // In-place reduction over all ranks.
  template <class T>
  void allreduce(std::span<T> data, ReduceOp op) {
    allreduce_raw(data.data(), data.size(), data_type_of<T>(), op);
  }
  // In-place reduction by a pipelined ring over the ranks in rank order: reduce-scatter, then
  // allgather, 2(n−1) steps of one block each (blocks as even as possible). Every receive is
  // posted before the first send, so a step waits only for its predecessor's block: across a WAN
  // the latencies add along a chain of 2(n−1) hops (what the round model's ring_allreduce_time
  // charges), where a ring of blocking sends would wait about the slowest hop at every step.
  // Block q is reduced around the ring, complete at rank q − 1, then copied to all: every rank
  // gets the same result. Extra memory: about 3(n−1)/n of the buffer. Traffic: 2(n−1)/n of it
  // each way.
  template <class T>
  void ring_allreduce(std::span<T> data, ReduceOp op) {
    ring_allreduce_raw(data.data(), data.size(), data_type_of<T>(), op);
  }
  template <class T>
  T allreduce_value(T value, ReduceOp op) {
    allreduce_raw(&value, 1, data_type_of<T>(), op);
    return value;
  }

  // One value from every rank, in rank order.
  template <class T>
  std::vector<T> allgather(const T& value) {
    std::vector<T> out(static_cast<std::size_t>(size_));
    allgather_raw(&value, out.data(), sizeof(T));
    return out;
  }

  // allgather_each() for small blocks where latency dominates (a WAN): up to kDirectRanks ranks,
  // every rank sends its block to every other at once (iallgather: n − 1 messages each, one
  // network latency, where MPI's allgather takes about log2 n rounds); beyond, allgather_each().
  static constexpr int kDirectRanks = 32;
  template <class T>
  std::vector<T> allgather_each_direct(std::span<const T> send) {
    if (size_ > kDirectRanks) return allgather_each(send);
    std::vector<T> out(send.size() * static_cast<std::size_t>(size_));
    Request request = iallgather<T>(send, out);
    wait(request);
    return out;
  }
  template <class T>
  std::vector<T> allgather_direct(const T& value) {
    return allgather_each_direct(std::span<const T>(&value, 1));
  }
  // allreduce() of a few values where latency dominates (a WAN): their allgather_each_direct,
  // combined on every rank in rank order (so every rank holds the same bits). For the small
  // agreements of every call (an input check, a profile), not for payloads.
  template <class T>
  void allreduce_direct(std::span<T> data, ReduceOp op) {
    static_assert(std::is_arithmetic_v<T>);
    if (!std::is_integral_v<T> && op == ReduceOp::bit_or)
      throw std::invalid_argument("allreduce_direct: bit_or of a floating-point type");
    if (size_ > kDirectRanks) return allreduce(data, op);
    const auto all = allgather_each_direct(std::span<const T>(data.data(), data.size()));
    for (std::size_t i = 0; i < data.size(); ++i) {
      T acc = all[i];
      for (std::size_t r = 1; r < static_cast<std::size_t>(size_); ++r) {
        const T x = all[r * data.size() + i];
        switch (op) {
          case ReduceOp::sum:
            acc = static_cast<T>(acc + x);
            break;
          case ReduceOp::min:
            acc = std::min(acc, x);
            break;
          case ReduceOp::max:
            acc = std::max(acc, x);
            break;
          case ReduceOp::bit_or:
            if constexpr (std::is_integral_v<T>) acc = static_cast<T>(acc | x);
            break;
        }
      }
      data[i] = acc;
    }
  }

  // Variable-size blocks from every rank, concatenated in rank order; counts[r] = block size of r.
  template <class T>
  std::vector<T> allgatherv(std::span<const T> send, std::vector<std::size_t>* counts_out) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<std::size_t> counts = allgather<std::size_t>(send.size());
    std::size_t total = 0;
    for (auto c : counts) total += c;
    std::vector<T> out(total);
    allgatherv_raw(send.data(), counts, out.data(), sizeof(T));
    if (counts_out) *counts_out = std::move(counts);
    return out;
  }

  // `k` values from every rank (send.size() == k on all ranks), concatenated in rank order.
  template <class T>
  std::vector<T> allgather_each(std::span<const T> send) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<T> out(send.size() * static_cast<std::size_t>(size_));
    allgather_raw(send.data(), out.data(), send.size() * sizeof(T));
    return out;
  }

  // Non-blocking allgatherv with known block sizes (counts[r] elements from rank r, received
  // consecutively in rank order into `recv`, which must hold their sum). `send`, `recv` and
  // `counts` must stay valid until wait(); the data may move while this rank computes.
  template <class T>
  Request iallgatherv(std::span<const T> send, std::span<const std::size_t> counts,
                      std::span<T> recv) {
    static_assert(std::is_trivially_copyable_v<T>);
    return iallgatherv_raw(send.data(), counts, recv.data(), sizeof(T));
  }

  // Non-blocking operations built from point-to-point messages (isend/irecv, the same code under
  // Open MPI and SMPI; SMPI 3.32's MPI_Iallreduce sends the whole buffer to every peer). Each is
  // collective: all ranks post the same operations in the same order. Buffers must stay valid
  // until wait(). Elements are split into blocks per rank, counts[q] for rank q, consecutive in
  // rank order; B = the buffer's bytes, b_q = block q's bytes, n = size(). Traffic (counted on
  // completion) is what this rank puts on and takes off the wire: every block goes directly to
  // its destination (n-1 messages in flight each way, the pattern of SMPI's own non-blocking
  // collectives; on the simulated 16-host cluster as fast as the ring, docs/simulation.md).
  // Progress and ordering (a stage is posted by this library, not by MPI):
  // - Every wait() and progress() on a communicator advances all of its requests (posts each
  //   completed stage's successor), so ranks may complete them in different orders: every request
  //   has its own message tags, from a per-communicator sequence (at most 16000 in flight).
  // - Every blocking operation on a communicator first posts the stages still to post of its
  //   requests (waiting for the stage before), so a peer blocked in wait() can reach it too.
  // - Requests of different communicators are advanced separately: a rank must not block on one
  //   communicator while a peer needs a stage of its request on another posted (wait the
  //   communicators' requests in the same order on all ranks).

  // Sum/min/max/bit_or of every rank's `data` into `data` on all ranks, in two stages:
  // reduce-scatter (rank q reduces block q; blocks as even as possible, the first
  // data.size() % n one element longer; empty blocks send nothing), then allgather of the reduced
  // blocks. The second stage is posted when the first completes, inside wait() or progress() (so
  // under SMPI, where progress() does nothing, inside wait()). Traffic each way:
  // B + (n-2)·b_rank, i.e. 2(n-1)/n·B when n divides the element count, as ring allreduce.
  // Reduction order per element: its owner's own value, then the others' in rank order; every
  // rank receives the owner's result. Extra memory: (n-1)·b_rank bytes of scratch while the
  // first stage runs. Elements: float, double, integers (bit_or: integers only).
  template <class T>
  Request iallreduce(std::span<T> data, ReduceOp op) {
    return iallreduce_raw(data.data(), data.size(), data_type_of<T>(), op);
  }
  // Like MPI_Ireduce_scatter: `send` holds sum(counts) elements, block q (counts[q] elements)
  // reduced over all ranks lands in rank q's `recv` (counts[rank()] elements). `send` and `recv`
  // must not overlap except when `recv` is exactly this rank's block of `send`. Traffic: sent
  // B − b_rank (block q to rank q), received (n−1)·b_rank. Scratch: (n-1)·b_rank bytes.
  template <class T>
  Request ireduce_scatter(std::span<const T> send, std::span<const std::size_t> counts,
                          std::span<T> recv, ReduceOp op) {
    return ireduce_scatter_raw(send.data(), send.size(), counts, recv.data(), recv.size(),
                               data_type_of<T>(), op);
  }
  // Equal blocks from every rank (send.size() elements each), concatenated in rank order into
  // `recv` (size() · send.size() elements; `send` may be this rank's block of `recv`). Traffic:
  // sent (n−1)·b, received (n−1)·b, b = send's bytes.
  template <class T>
  Request iallgather(std::span<const T> send, std::span<T> recv) {
    static_assert(std::is_trivially_copyable_v<T>);
    return iallgather_raw(send.data(), send.size(), recv.data(), recv.size(), sizeof(T));
  }

  // Completes `request` (no-op if inactive), posting any stage still to come, and adds its
  // traffic to the counters. MPI errors throw CommError naming rank and operation, as does a
  // request posted on another communicator.
  void wait(Request& request);
  // Lets the MPI library move `request`'s data while this rank computes (MPI_Testsome over the
  // communicator's requests; completed stages post their successors; if `request` completed, its
  // traffic is counted and wait() has nothing left to do). Open MPI's TCP transport progresses
  // non-blocking operations only inside MPI calls. Does nothing under SMPI, whose simulated
  // network progresses by itself (and which charges time for each test); a two-stage request
  // there moves to its second stage in the next wait() or blocking operation.
  void progress(Request& request);
  // Posts the next stage of every request on this communicator whose current stage has completed,
  // without waiting (one MPI_Testsome over their messages), so that a two-stage request
  // (iallreduce) moves on while this rank computes. Unlike progress(), it also acts under SMPI.
  // SMPI sleeps smpi/test (0.1 ms, growing with repeated failures) in every MPI_Test, a guard
  // against polling loops that never advance simulated time; atoll never polls under SMPI, so the
  // first call sets smpi/test to 0 for the rest of the simulation (the call's own CPU time is still
  // charged). Call it at a few points (a model unit's boundary), not in a loop.
  void advance_stages();

  // Personalised exchange of one value per peer (send.size() == size()).
  template <class T>
  std::vector<T> alltoall(std::span<const T> send) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<T> out(send.size());
    alltoall_raw(send.data(), out.data(), sizeof(T));
    return out;
  }

  // Personalised exchange of variable blocks: send_counts[r] elements go to rank r (consecutive in
  // `send`), recv_counts[r] elements arrive from r into `recv` (consecutive, rank order).
  template <class T>
  void alltoallv(std::span<const T> send, std::span<const std::size_t> send_counts,
                 std::span<T> recv, std::span<const std::size_t> recv_counts) {
    static_assert(std::is_trivially_copyable_v<T>);
    alltoallv_raw(send.data(), send_counts, recv.data(), recv_counts, sizeof(T));
  }

  // Exchanges where receivers know only a bound on what each rank sends them, not the count (no
  // counts exchanged first: one latency less). `recv` holds max_counts[r] elements for rank r, in
  // rank order, each at the sum of the bounds before it; they return the counts received. A
  // block over its bound fails on every rank it reaches (CommError: its receivers' messages are
  // truncated, its sender checks its own).
  // alltoallv_bounded: send_counts[r] elements to rank r, consecutive in `send`.
  template <class T>
  std::vector<std::size_t> alltoallv_bounded(std::span<const T> send,
                                             std::span<const std::size_t> send_counts,
                                             std::span<const std::size_t> max_counts,
                                             std::span<T> recv) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<std::size_t> offsets(send_counts.size(), 0);
    for (std::size_t r = 1; r < offsets.size(); ++r)
      offsets[r] = offsets[r - 1] + send_counts[r - 1];
    return alltoallv_bounded_raw(send.data(), send_counts, offsets, max_counts, recv.data(),
                                 recv.size(), sizeof(T));
  }
  // allgather_bounded: the same block `send` to every rank.
  template <class T>
  std::vector<std::size_t> allgather_bounded(std::span<const T> send,
                                             std::span<const std::size_t> max_counts,
                                             std::span<T> recv) {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::vector<std::size_t> counts(max_counts.size(), send.size()),
        offsets(max_counts.size(), 0);
    return alltoallv_bounded_raw(send.data(), counts, offsets, max_counts, recv.data(), recv.size(),
                                 sizeof(T));
  }

  // Point-to-point: send to `dest` and receive from `source` at once (deadlock-free pairing).
  template <class T>
  void sendrecv(std::span<const T> send, int dest, std::span<T> recv, int source) {
    static_assert(std::is_trivially_copyable_v<T>);
    sendrecv_raw(send.data(), send.size() * sizeof(T), dest, recv.data(), recv.size() * sizeof(T),
                 source);
  }
  // Point-to-point where the receiver does not know the size: exchanges sizes first.
  template <class T>
  std::vector<T> sendrecv_sized(std::span<const T> send, int dest, int source) {
    std::uint64_t my_count = send.size(), peer_count = 0;
    sendrecv<std::uint64_t>(std::span<const std::uint64_t>(&my_count, 1), dest,
                            std::span<std::uint64_t>(&peer_count, 1), source);
    std::vector<T> recv(peer_count);
    sendrecv<T>(send, dest, recv, source);
    return recv;
  }
  template <class T>
  void send(std::span<const T> data, int dest) {
    send_raw(data.data(), data.size() * sizeof(T), dest);
  }
  template <class T>
  void recv(std::span<T> data, int source) {
    recv_raw(data.data(), data.size() * sizeof(T), source);
  }

  template <class T>
  void broadcast(std::span<T> data, int root) {
    broadcast_raw(data.data(), data.size() * sizeof(T), root);
  }

  // Simulation only: true in the SMPI build. Between fixed_compute_begin() and
  // fixed_compute_end(s) this rank's computation is not measured; s seconds of simulated
  // computation are charged instead (no MPI call may happen in between). Both do nothing under
  // real MPI. Used to hold model compute constant when comparing synchronization schemes.
  static bool simulated();
  void fixed_compute_begin();
  void fixed_compute_end(double seconds);
  // How computation marked by ChargedWork is charged (cpu_costs.h, charged_work.h): measured
  // (nullptr or mode measured, the default), recorded or charged from a table. Shared with the
  // sub-communicators made after it is set. Local, but every rank must set the same mode. A
  // table needs SMPI (std::invalid_argument otherwise): it switches SMPI's measuring of
  // computation off for the whole simulation (smpi/simulate-computation:no, cpu-threshold 0),
  // so only ChargedWork sections and fixed_compute_end() advance a rank's clock.
  void set_cpu_charging(std::shared_ptr<CpuCharging> charging);
  CpuCharging* cpu_charging() const { return cpu_charging_.get(); }
  // Experiments (stragglers, stalls): this rank is busy `seconds` longer: charged to the
  // simulated clock under SMPI, slept under real MPI.
  void delay(double seconds);

  // Turns a local failure into the same error on every rank, never a hang: each rank passes its
  // own error (or nullopt); if any rank failed, all throw CollectiveError carrying the message of
  // the lowest failing rank. Collective.
  void agree(const std::optional<std::string>& local_error);

  const TrafficCounters& traffic() const { return traffic_; }
  // Adds traffic this rank moved on a sub-communicator on this one's behalf (a scheme's exchange
  // over its own split communicators), so that this one's counters report it.
  void add_traffic(std::uint64_t bytes_sent, std::uint64_t bytes_received) {
    traffic_.bytes_sent += bytes_sent;
    traffic_.bytes_received += bytes_received;
  }

 private:
  struct Impl;
  Communicator(std::unique_ptr<Impl> impl, int rank, int size);
  void allreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op);
  void ring_allreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op);
  void allgather_raw(const void* send, void* recv, std::size_t bytes_each);
  void allgatherv_raw(const void* send, const std::vector<std::size_t>& counts, void* recv,
                      std::size_t elem_bytes);
  Request iallgatherv_raw(const void* send, std::span<const std::size_t> counts, void* recv,
                          std::size_t elem_bytes);
  Request iallreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op);
  Request ireduce_scatter_raw(const void* send, std::size_t send_count,
                              std::span<const std::size_t> counts, void* recv,
                              std::size_t recv_count, DataType type, ReduceOp op);
  Request iallgather_raw(const void* send, std::size_t send_count, void* recv,
                         std::size_t recv_count, std::size_t elem_bytes);
  // Closes a request whose operation completed: adds its traffic to the counters.
  void finish(Request& request);
  // Refuses (CommError) a request posted on another communicator.
  void check_owner(const Request& request, const char* call) const;
  void alltoall_raw(const void* send, void* recv, std::size_t bytes_each);
  std::vector<std::size_t> alltoallv_bounded_raw(const void* send,
                                                 std::span<const std::size_t> send_counts,
                                                 std::span<const std::size_t> send_offsets,
                                                 std::span<const std::size_t> max_counts,
                                                 void* recv, std::size_t recv_count,
                                                 std::size_t elem_bytes);
  void alltoallv_raw(const void* send, std::span<const std::size_t> send_counts, void* recv,
                     std::span<const std::size_t> recv_counts, std::size_t elem_bytes);
  void sendrecv_raw(const void* send, std::size_t send_bytes, int dest, void* recv,
                    std::size_t recv_bytes, int source);
  void send_raw(const void* data, std::size_t bytes, int dest);
  void recv_raw(void* data, std::size_t bytes, int source);
  void broadcast_raw(void* data, std::size_t bytes, int root);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_node_ = 1;
  TrafficCounters traffic_;
  std::shared_ptr<CpuCharging> cpu_charging_;
};

// RAII owner of the MPI runtime (MPI_Init / MPI_Finalize). Create one in main, before any
// Communicator; pass communicators explicitly from there.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  // Ends every rank of the job after an unrecoverable error (MPI_Abort).
  [[noreturn]] static void abort_job(int code);
};

}  // namespace atl::comm
