// The communicator layer: the only way atoll code talks to the distributed engine.
//
// One implementation (src/comm/communicator.cpp) is compiled twice: against Open MPI for
// build/atoll and against SimGrid SMPI for build/atoll-smpi. Nothing else includes <mpi.h>, so the
// synchronization schemes run unchanged on a real cluster and on a simulated one.
//
// Contracts:
// - Every operation is collective over the communicator unless it says otherwise; all ranks must
//   call it with matching sizes (alltoallv receive counts must equal the peers' send counts).
// - MPI failures become CommError naming the rank and the operation.
// - Traffic is metered per rank (see TrafficCounters) so schemes can report bytes per phase.
#pragma once

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

// A non-blocking collective in flight (see Communicator::iallgatherv). Complete it with
// Communicator::wait before touching its buffers; destroying an incomplete request waits for it
// (MPI forbids freeing a pending collective), so buffers are never released under the library.
class Request {
 public:
  Request();
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;

 private:
  friend class Communicator;
  struct State;
  std::unique_ptr<State> state_;
};

class Communicator {
 public:
  // The world communicator of an initialised MPI runtime (see MpiRuntime).
  static Communicator world();
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
  // Completes `request` (no-op if inactive); MPI errors throw CommError naming the operation.
  void wait(Request& request);
  // Lets the MPI library move `request`'s data while this rank computes (MPI_Test): Open MPI's
  // TCP transport progresses non-blocking collectives only inside MPI calls. Does nothing under
  // SMPI, whose simulated network progresses by itself (and which charges time for each test).
  void progress(Request& request);

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

  // Turns a local failure into the same error on every rank, never a hang: each rank passes its
  // own error (or nullopt); if any rank failed, all throw CollectiveError carrying the message of
  // the lowest failing rank. Collective.
  void agree(const std::optional<std::string>& local_error);

  const TrafficCounters& traffic() const { return traffic_; }

 private:
  struct Impl;
  Communicator(std::unique_ptr<Impl> impl, int rank, int size);
  void allreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op);
  void allgather_raw(const void* send, void* recv, std::size_t bytes_each);
  void allgatherv_raw(const void* send, const std::vector<std::size_t>& counts, void* recv,
                      std::size_t elem_bytes);
  Request iallgatherv_raw(const void* send, std::span<const std::size_t> counts, void* recv,
                          std::size_t elem_bytes);
  void alltoall_raw(const void* send, void* recv, std::size_t bytes_each);
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
