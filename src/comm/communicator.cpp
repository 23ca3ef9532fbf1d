// The only translation unit that includes <mpi.h>. Compiled once against Open MPI and once against
// SimGrid SMPI (whose mpi.h comes first on the include path for that flavour).
#include "atoll/comm/communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>

#include "atoll/comm/cpu_costs.h"
#include "atoll/comm/watchdog.h"

#ifdef ATOLL_SMPI
#include <xbt/config.hpp>
#endif

namespace atl::comm {
namespace {

MPI_Datatype to_mpi(DataType t) {
  switch (t) {
    case DataType::u8:
      return MPI_UINT8_T;
    case DataType::i32:
      return MPI_INT32_T;
    case DataType::u32:
      return MPI_UINT32_T;
    case DataType::i64:
      return MPI_INT64_T;
    case DataType::u64:
      return MPI_UINT64_T;
    case DataType::f32:
      return MPI_FLOAT;
    case DataType::f64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::u8:
      return 1;
    case DataType::i32:
    case DataType::u32:
    case DataType::f32:
      return 4;
    case DataType::i64:
    case DataType::u64:
    case DataType::f64:
      return 8;
  }
  return 0;
}

MPI_Op to_mpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::bit_or:
      return MPI_BOR;
  }
  return MPI_OP_NULL;
}

// MPI counts are int: anything larger is an error we name rather than a silent truncation.
int checked_count(std::size_t count, int rank, const char* op) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw CommError("rank " + std::to_string(rank) + ": " + op + ": count " +
                    std::to_string(count) + " exceeds the MPI limit of INT_MAX elements");
  }
  return static_cast<int>(count);
}

// Largest block moved by one point-to-point or broadcast call (bytes); bigger buffers are chunked.
constexpr std::size_t kChunkBytes = std::size_t{1} << 30;

// Message tags: 0 sendrecv, 1 send/recv, kExchangeTag the point-to-point alltoall(v) (see
// exchange_point_to_point); from kFirstRequestTag on, two per non-blocking request (one per stage),
// kRequestTagWindow requests before they repeat (MPI guarantees tags <= 32767).
constexpr int kExchangeTag = 2;
constexpr int kFirstRequestTag = 3;
constexpr int kRequestTagWindow = 16000;

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// Ranks of `comm` on this rank's node (MPI_COMM_TYPE_SHARED); under SMPI every simulated rank
// lives in one process, so all of them.
int ranks_on_node_of(MPI_Comm comm, int rank, int size) {
  int on_node = size;
#ifndef ATOLL_SMPI
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &on_node);
    MPI_Comm_free(&node);
  }
#else
  (void)comm;
  (void)rank;
#endif
  return on_node;
}

// Whether alltoall and alltoallv run as exchange_linear instead of MPI_Alltoall(v): under SMPI,
// at world sizes that are not powers of two. There SimGrid 3.32's `ompi` selector (the one
// scripts/simulate sets) picks its `pair` algorithms, which refuse such sizes ("alltoallv pair
// algorithm can't be used with non power of two number of processes"), for alltoallv at 3, 65-127
// and 257-1023 ranks and for alltoall at 3-7 ranks with blocks of 512 KiB to 1 MiB (and at some
// sizes from 64 ranks up); at the other sizes below 64 it picks basic_linear, the message pattern
// exchange_linear repeats (alltoall of blocks under 512 bytes at 17-31 and 33-63 ranks: Bruck).
// Powers of two keep the library's choice, so the simulated times measured there
// (docs/results/) are unchanged. Open MPI's own selection runs at every size.
bool exchange_point_to_point(int size) {
#ifdef ATOLL_SMPI
  return (size & (size - 1)) != 0;
#else
  (void)size;
  return false;
#endif
}

// Personalised exchange by point-to-point messages, as Open MPI's basic_linear alltoallv (and
// SMPI's ompi_basic_linear) does it: the own block copied, a receive from every peer posted, then a
// send to every peer, all awaited together. Empty blocks are sent too: one message per pair and
// call keeps consecutive exchanges matched in order (one tag). Counts and displacements are in
// elements of `t` (`elem_bytes` each). Returns an MPI error code.
int exchange_linear(const char* send, const int* send_counts, const int* send_displs, char* recv,
                    const int* recv_counts, const int* recv_displs, MPI_Datatype t,
                    std::size_t elem_bytes, int rank, int size, MPI_Comm comm) {
  if (send_counts[rank] > recv_counts[rank]) return MPI_ERR_TRUNCATE;
  if (send_counts[rank] > 0) {
    std::memcpy(recv + static_cast<std::size_t>(recv_displs[rank]) * elem_bytes,
                send + static_cast<std::size_t>(send_displs[rank]) * elem_bytes,
                static_cast<std::size_t>(send_counts[rank]) * elem_bytes);
  }
  if (size == 1) return MPI_SUCCESS;
  std::vector<MPI_Request> requests;
  requests.reserve(2 * static_cast<std::size_t>(size - 1));
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    requests.push_back(MPI_REQUEST_NULL);
    const int rc = MPI_Irecv(recv + static_cast<std::size_t>(recv_displs[q]) * elem_bytes,
                             recv_counts[q], t, q, kExchangeTag, comm, &requests.back());
    if (rc != MPI_SUCCESS) return rc;
  }
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    requests.push_back(MPI_REQUEST_NULL);
    const int rc = MPI_Isend(send + static_cast<std::size_t>(send_displs[q]) * elem_bytes,
                             send_counts[q], t, q, kExchangeTag, comm, &requests.back());
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
}

}  // namespace

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owns_comm = false;  // true for split() results; never for MPI_COMM_WORLD
  // Sequence of non-blocking requests posted on this communicator (the same on every rank, as
  // they are posted collectively): their message tags.
  std::uint32_t requests_posted = 0;
  // Contiguous element types of a given byte size, created on demand, freed with the Impl.
  std::vector<std::pair<std::size_t, MPI_Datatype>> element_types;
  // Non-blocking requests not yet completed (see Request::State::advance).
  std::vector<Request::State*> in_flight;

  ~Impl();
  // Takes `comm`, which this (parent) communicator made (split, subgroup): owned, errors as
  // return codes; its rank, size and ranks on this node.
  struct Adopted {
    int rank = 0, size = 1, on_node = 1;
  };
  Adopted adopt(Impl& child, int parent_rank, const char* what);
  // Before any blocking operation: posts every stage still to post of the requests in flight
  // (waiting for the stage before it), so that a peer blocked in wait() on one of them can finish
  // and reach the same blocking operation.
  void post_pending_stages(int rank);

  int next_request_tag() {
    const auto seq = static_cast<int>(requests_posted++ % kRequestTagWindow);
    return kFirstRequestTag + 2 * seq;
  }

  MPI_Datatype element_type(std::size_t bytes) {
    for (auto& [b, t] : element_types)
      if (b == bytes) return t;
    MPI_Datatype t;
    MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    element_types.emplace_back(bytes, t);
    return t;
  }

  void check(int rc, int rank, const char* op) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw CommError("rank " + std::to_string(rank) + ": " + op +
                    " failed: " + std::string(text, static_cast<std::size_t>(len)));
  }
};

Communicator Communicator::world() {
  auto impl = std::make_unique<Impl>();
  impl->comm = MPI_COMM_WORLD;
  // Errors come back as return codes so they can become exceptions that name rank and op.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Communicator c(std::move(impl), rank, size);
  c.ranks_on_node_ = ranks_on_node_of(MPI_COMM_WORLD, rank, size);
  return c;
}

Communicator Communicator::split(int color, int key) {
  const WatchedCall watched("split", rank_, size_, !impl_->owns_comm);
  // MPI_UNDEFINED (negative) would leave this rank without a communicator; other negative values
  // are MPI errors that could leave peers inside the split: refuse both on every rank first.
  agree(color < 0
            ? std::optional<std::string>("split: color " + std::to_string(color) + " on rank " +
                                         std::to_string(rank_) + " (colors must be >= 0)")
            : std::nullopt);
  auto impl = std::make_unique<Impl>();
  impl_->check(MPI_Comm_split(impl_->comm, color, key, &impl->comm), rank_, "MPI_Comm_split");
  const auto a = impl_->adopt(*impl, rank_, "split");
  Communicator c(std::move(impl), a.rank, a.size);
  c.cpu_charging_ = cpu_charging_;
  c.ranks_on_node_ = a.on_node;
  return c;
}

Communicator Communicator::subgroup(std::span<const int> ranks) {
  std::vector<bool> seen(static_cast<std::size_t>(size_), false);
  bool member = false;
  for (const int r : ranks) {
    if (r < 0 || r >= size_ || seen[static_cast<std::size_t>(r)]) {
      throw std::invalid_argument("subgroup: rank " + std::to_string(r) +
                                  (r < 0 || r >= size_
                                       ? " is out of range (size " + std::to_string(size_) + ")"
                                       : " is listed twice"));
    }
    seen[static_cast<std::size_t>(r)] = true;
    member = member || r == rank_;
  }
  if (!member) {
    throw std::invalid_argument("subgroup: rank " + std::to_string(rank_) +
                                " is not among the listed ranks");
  }
  const WatchedCall watched("subgroup", rank_, size_, !impl_->owns_comm);
  MPI_Group all = MPI_GROUP_NULL, some = MPI_GROUP_NULL;
  impl_->check(MPI_Comm_group(impl_->comm, &all), rank_, "MPI_Comm_group");
  impl_->check(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &some), rank_,
               "MPI_Group_incl");
  auto impl = std::make_unique<Impl>();
  const int rc = MPI_Comm_create_group(impl_->comm, some, 0, &impl->comm);
  MPI_Group_free(&some);
  MPI_Group_free(&all);
  impl_->check(rc, rank_, "MPI_Comm_create_group");
  const auto a = impl_->adopt(*impl, rank_, "subgroup");
  Communicator c(std::move(impl), a.rank, a.size);
  c.cpu_charging_ = cpu_charging_;
  c.ranks_on_node_ = a.on_node;
  return c;
}

Communicator::Communicator(std::unique_ptr<Impl> impl, int rank, int size)
    : impl_(std::move(impl)), rank_(rank), size_(size) {}
Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

double Communicator::wtime() const { return MPI_Wtime(); }

void Communicator::barrier() {
  const WatchedCall watched("barrier", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  impl_->check(MPI_Barrier(impl_->comm), rank_, "MPI_Barrier");
}

void Communicator::ring_allreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op) {
  const WatchedCall watched("ring allreduce", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const auto n = static_cast<std::size_t>(size_);
  if (n < 2) return;
  const std::size_t elem = size_of(type);
  auto* bytes = static_cast<char*>(data);
  auto first = [&](std::size_t b) { return b * (count / n) + std::min(b, count % n); };
  auto len = [&](std::size_t b) { return first(b + 1) - first(b); };
  const std::size_t steps = 2 * (n - 1), r = static_cast<std::size_t>(rank_);
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  // Step s sends block r − s to the successor and receives block r − s − 1 from the predecessor
  // (mod n): reduced into this rank's copy in the reduce-scatter (s < n − 1; block r + 1 is then
  // complete here), copied in the allgather.
  auto sent = [&](std::size_t s) { return (r + 2 * n - s) % n; };  // s < 2n − 2
  auto got = [&](std::size_t s) { return (sent(s) + n - 1) % n; };
  // Every block's count fits an int (checked before any message is posted).
  (void)checked_count(count / n + (count % n != 0 ? 1 : 0), rank_, "ring allreduce");
  const int tag = impl_->next_request_tag();
  const MPI_Datatype t = to_mpi(type);
  std::vector<std::vector<char>> in(steps), out(steps);
  std::vector<MPI_Request> recvs(steps, MPI_REQUEST_NULL), sends(steps, MPI_REQUEST_NULL);
  for (std::size_t s = 0; s < steps; ++s) {  // every receive first, in step order
    in[s].resize(len(got(s)) * elem);
    impl_->check(MPI_Irecv(in[s].data(), static_cast<int>(len(got(s))), t, prev, tag, impl_->comm,
                           &recvs[s]),
                 rank_, "MPI_Irecv");
  }
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t b = sent(s);
    out[s].assign(bytes + first(b) * elem, bytes + first(b + 1) * elem);
    impl_->check(
        MPI_Isend(out[s].data(), static_cast<int>(len(b)), t, next, tag, impl_->comm, &sends[s]),
        rank_, "MPI_Isend");
    impl_->check(MPI_Wait(&recvs[s], MPI_STATUS_IGNORE), rank_, "MPI_Wait");
    char* block = bytes + first(got(s)) * elem;
    const int m = static_cast<int>(len(got(s)));
    if (s < n - 1) {
      if (m > 0) {
        impl_->check(MPI_Reduce_local(in[s].data(), block, m, t, to_mpi(op)), rank_,
                     "MPI_Reduce_local");
      }
    } else if (m > 0) {
      std::memcpy(block, in[s].data(), in[s].size());
    }
    in[s] = {};
  }
  impl_->check(MPI_Waitall(static_cast<int>(steps), sends.data(), MPI_STATUSES_IGNORE), rank_,
               "MPI_Waitall");
  std::uint64_t moved = 0;
  for (std::size_t s = 0; s < steps; ++s) moved += len(sent(s)) * elem;
  traffic_.bytes_sent += moved;
  traffic_.bytes_received += moved;
}

void Communicator::allreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op) {
  const WatchedCall watched("allreduce", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const std::size_t elem = size_of(type);
  auto* bytes = static_cast<char*>(data);
  const std::size_t chunk = kChunkBytes / elem;
  for (std::size_t done = 0; done < count; done += chunk) {
    const std::size_t n = std::min(chunk, count - done);
    impl_->check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * elem, static_cast<int>(n), to_mpi(type),
                               to_mpi(op), impl_->comm),
                 rank_, "MPI_Allreduce");
  }
  if (size_ > 1) {
    const auto algo_bytes = static_cast<std::uint64_t>(2.0 * (size_ - 1) / size_ * count * elem);
    traffic_.bytes_sent += algo_bytes;
    traffic_.bytes_received += algo_bytes;
  }
}

void Communicator::allgather_raw(const void* send, void* recv, std::size_t bytes_each) {
  const WatchedCall watched("allgather", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  impl_->check(MPI_Allgather(send, 1, impl_->element_type(bytes_each), recv, 1,
                             impl_->element_type(bytes_each), impl_->comm),
               rank_, "MPI_Allgather");
  traffic_.bytes_sent += bytes_each * (size_ - 1);
  traffic_.bytes_received += bytes_each * (size_ - 1);
}

namespace {
// MPI's int counts and displacements of an allgatherv, and the bytes the ring algorithm moves for
// this rank (every block but its own arrives; every block but its successor's leaves).
struct AllgathervLayout {
  std::vector<int> counts, displs;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
};
AllgathervLayout allgatherv_layout(std::span<const std::size_t> counts, int rank, int size,
                                   std::size_t elem_bytes, const char* op) {
  if (counts.size() != static_cast<std::size_t>(size)) {
    throw CommError("rank " + std::to_string(rank) + ": " + op + ": " +
                    std::to_string(counts.size()) + " counts for " + std::to_string(size) +
                    " ranks");
  }
  AllgathervLayout l;
  l.counts.resize(counts.size());
  l.displs.resize(counts.size());
  std::size_t offset = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    l.counts[q] = checked_count(counts[q], rank, op);
    l.displs[q] = checked_count(offset, rank, op);
    offset += counts[q];
  }
  if (size > 1) {
    l.bytes_received = (offset - counts[rank]) * elem_bytes;
    l.bytes_sent = (offset - counts[(rank + 1) % size]) * elem_bytes;
  }
  return l;
}
}  // namespace

void Communicator::allgatherv_raw(const void* send, const std::vector<std::size_t>& counts,
                                  void* recv, std::size_t elem_bytes) {
  const WatchedCall watched("allgatherv", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const auto l = allgatherv_layout(counts, rank_, size_, elem_bytes, "MPI_Allgatherv");
  MPI_Datatype t = impl_->element_type(elem_bytes);
  impl_->check(MPI_Allgatherv(send, l.counts[rank_], t, recv, l.counts.data(), l.displs.data(), t,
                              impl_->comm),
               rank_, "MPI_Allgatherv");
  traffic_.bytes_received += l.bytes_received;
  traffic_.bytes_sent += l.bytes_sent;
}

#ifdef ATOLL_SMPI
void Communicator::set_cpu_charging(std::shared_ptr<CpuCharging> charging) {
  if (charging && charging->mode == CpuCharging::Mode::table) {
    simgrid::config::set_value<bool>("smpi/simulate-computation", false);
    simgrid::config::set_value<double>("smpi/cpu-threshold", 0.0);  // charge even sub-µs costs
  }
  cpu_charging_ = std::move(charging);
}
bool Communicator::simulated() { return true; }
void Communicator::fixed_compute_begin() { smpi_bench_end(); }  // charges what ran so far
void Communicator::fixed_compute_end(double seconds) {
  smpi_execute(seconds);
  smpi_bench_begin();
}
void Communicator::delay(double seconds) {
  smpi_bench_end();
  smpi_execute(seconds);
  smpi_bench_begin();
}
#else
void Communicator::set_cpu_charging(std::shared_ptr<CpuCharging> charging) {
  if (charging && charging->mode == CpuCharging::Mode::table) {
    throw std::invalid_argument(
        "a cpu cost table charges simulated time: run build/atoll-smpi under scripts/simulate");
  }
  cpu_charging_ = std::move(charging);
}
bool Communicator::simulated() { return false; }
void Communicator::fixed_compute_begin() {}
void Communicator::fixed_compute_end(double) {}
void Communicator::delay(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}
#endif

// The state of one non-blocking operation: its current stage's MPI requests, the stage to post
// when they complete, what the library reads or writes until then, and its traffic. While in
// flight it is listed in its communicator's `in_flight`, and every wait or progress on that
// communicator advances all of them: a rank blocked in wait(A) still posts B's second stage, which
// a peer blocked in wait(B) needs, so ranks may complete their requests in different orders.
struct Request::State {
  const char* op = "";                // the public operation, named in errors
  std::vector<MPI_Request> requests;  // the current stage's (none when nothing to move)
  // Posts the next stage once the current one has completed: fills `requests` again (and may set
  // next_stage again); returns an MPI error code. Empty when the current stage is the last.
  std::function<int(State&)> next_stage;
  const char* next_stage_call = "";          // the MPI calls next_stage makes, named in errors
  TrafficCounters traffic;                   // added to the communicator's counters on completion
  std::vector<State*>* in_flight = nullptr;  // the communicator's list, while listed
  // Owned for the library until completion: iallgatherv's int counts and displacements; the
  // point-to-point operations' block layout (elements) and reduce-scatter's receive scratch.
  std::vector<int> mpi_counts, mpi_displs;
  std::vector<std::size_t> block_counts, block_offsets;
  // Not zero-filled: filling it would be charged as computation under SMPI, and MPI overwrites it.
  std::unique_ptr<char[]> scratch;

  State(const char* op_name, std::vector<State*>& list) : op(op_name), in_flight(&list) {
    list.push_back(this);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (in_flight) std::erase(*in_flight, this);
  }

  bool done() const { return requests.empty() && !next_stage; }
  bool stage_pending() const { return static_cast<bool>(next_stage); }

  // If the current stage has completed, posts the following ones (until one has messages in
  // flight or none is left).
  int post_ready_stage(const char*& call) {
    for (auto r : requests)
      if (r != MPI_REQUEST_NULL) return MPI_SUCCESS;
    requests.clear();
    while (requests.empty() && next_stage) {
      auto stage = std::move(next_stage);
      next_stage = nullptr;
      call = next_stage_call;
      const int rc = stage(*this);
      if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
  }

  enum class Until { target_done, all_stages_posted, one_pass };
  // The progress engine of one communicator's requests: posts every ready stage, then waits for
  // (MPI_Waitsome) or tests (MPI_Testsome) any message in flight, until `target` is done, until
  // no request has a stage left to post, or once. On an error returns its code, the MPI call in
  // `call` and the request it concerns (or `target`) in `failed`.
  static int advance(std::vector<State*>& all, const State* target, Until until, const char*& call,
                     const State*& failed) {
    std::vector<MPI_Request> flat;
    std::vector<std::pair<State*, std::size_t>> owner;
    for (bool waited = false;;) {
      bool pending = false;
      for (State* s : all) {
        failed = s;
        const int rc = s->post_ready_stage(call);
        if (rc != MPI_SUCCESS) return rc;
        pending = pending || s->stage_pending();
      }
      failed = target;
      if (until == Until::target_done && target->done()) return MPI_SUCCESS;
      if (until == Until::all_stages_posted && !pending) return MPI_SUCCESS;
      if (until == Until::one_pass && waited) return MPI_SUCCESS;
      flat.clear();
      owner.clear();
      for (State* s : all)
        for (std::size_t k = 0; k < s->requests.size(); ++k)
          if (s->requests[k] != MPI_REQUEST_NULL) {
            flat.push_back(s->requests[k]);
            owner.emplace_back(s, k);
          }
      if (flat.empty()) return MPI_SUCCESS;  // nothing in flight: nothing left to advance
      // Blocking: one completion at a time (MPI_Waitany); SMPI's MPI_Waitsome tests every other
      // request after the first completes and charges simulated time (smpi/test) for each test.
      // Testing (progress(), never under SMPI): MPI_Testsome, everything that completed.
      const int n = static_cast<int>(flat.size());
      int completed = 0, index = MPI_UNDEFINED;
      std::vector<int> indices(flat.size());
      call = until == Until::one_pass ? "MPI_Testsome" : "MPI_Waitany";
      const int rc =
          until == Until::one_pass
              ? MPI_Testsome(n, flat.data(), &completed, indices.data(), MPI_STATUSES_IGNORE)
              : MPI_Waitany(n, flat.data(), &index, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return rc;
      for (std::size_t i = 0; i < flat.size(); ++i)
        owner[i].first->requests[owner[i].second] = flat[i];
      waited = true;
    }
  }

  // Completes an abandoned request, every stage; errors cannot be reported from a destructor.
  static void complete_quietly(std::unique_ptr<State>& state) {
    if (!state) return;
    if (state->in_flight) {
      const char* call = nullptr;
      const State* failed = nullptr;
      (void)advance(*state->in_flight, state.get(), Until::target_done, call, failed);
    }
    state.reset();
  }

  // Point-to-point messages of `count` elements (none when 0: both sides know the counts).
  int isend(const void* buf, std::size_t count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    if (count == 0) return MPI_SUCCESS;
    requests.push_back(MPI_REQUEST_NULL);
    return MPI_Isend(buf, static_cast<int>(count), t, dest, tag, c, &requests.back());
  }
  int irecv(void* buf, std::size_t count, MPI_Datatype t, int source, int tag, MPI_Comm c) {
    if (count == 0) return MPI_SUCCESS;
    requests.push_back(MPI_REQUEST_NULL);
    return MPI_Irecv(buf, static_cast<int>(count), t, source, tag, c, &requests.back());
  }

  // Direct reduce-scatter, first half: block q of `send` to rank q; the n-1 contributions to
  // this rank's block into `scratch`, in rank order (self skipped).
  int post_reduce_scatter(const char* send, MPI_Datatype t, std::size_t elem, int rank, int size,
                          MPI_Comm c, int tag) {
    const std::size_t mine = block_counts[rank];
    scratch =
        std::make_unique_for_overwrite<char[]>(mine * elem * static_cast<std::size_t>(size - 1));
    std::size_t slot = 0;
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      int rc = irecv(scratch.get() + slot++ * mine * elem, mine, t, q, tag, c);
      if (rc == MPI_SUCCESS)
        rc = isend(send + block_offsets[q] * elem, block_counts[q], t, q, tag, c);
      if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
  }
  // Second half, once everything arrived: `recv` (holding this rank's own contribution) op= each
  // peer's, in rank order; then the scratch is released.
  int reduce_received(char* recv, MPI_Datatype t, MPI_Op op, std::size_t elem, int rank, int size) {
    const std::size_t mine = block_counts[rank];
    for (int slot = 0; slot + 1 < size && mine > 0; ++slot) {
      const int rc =
          MPI_Reduce_local(scratch.get() + slot * mine * elem, recv, static_cast<int>(mine), t, op);
      if (rc != MPI_SUCCESS) return rc;
    }
    scratch.reset();
    return MPI_SUCCESS;
  }
  // Direct allgather: this rank's block of `recv` to every peer, block q of `recv` from rank q.
  int post_allgather(char* recv, MPI_Datatype t, std::size_t elem, int rank, int size, MPI_Comm c,
                     int tag) {
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      int rc = irecv(recv + block_offsets[q] * elem, block_counts[q], t, q, tag, c);
      if (rc == MPI_SUCCESS)
        rc = isend(recv + block_offsets[rank] * elem, block_counts[rank], t, q, tag, c);
      if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
  }
};

Communicator::Impl::Adopted Communicator::Impl::adopt(Impl& child, int parent_rank,
                                                      const char* what) {
  child.owns_comm = true;
  check(MPI_Comm_set_errhandler(child.comm, MPI_ERRORS_RETURN), parent_rank,
        (std::string("MPI_Comm_set_errhandler (") + what + ")").c_str());
  Adopted a;
  MPI_Comm_rank(child.comm, &a.rank);
  MPI_Comm_size(child.comm, &a.size);
  a.on_node = ranks_on_node_of(child.comm, a.rank, a.size);
  return a;
}

Communicator::Impl::~Impl() {
  // Requests outliving their communicator are completed now (they could not be later).
  while (!in_flight.empty()) {
    Request::State* s = in_flight.front();
    const char* call = nullptr;
    const Request::State* failed = nullptr;
    (void)Request::State::advance(in_flight, s, Request::State::Until::target_done, call, failed);
    s->requests.clear();
    s->next_stage = nullptr;
    s->in_flight = nullptr;
    in_flight.erase(in_flight.begin());
  }
  if (mpi_finalized()) return;
  for (auto& [bytes, type] : element_types) MPI_Type_free(&type);
  if (owns_comm && comm != MPI_COMM_NULL && comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
}

void Communicator::Impl::post_pending_stages(int rank) {
  bool pending = false;
  for (const auto* s : in_flight) pending = pending || s->stage_pending();
  if (!pending) return;
  const char* call = nullptr;
  const Request::State* failed = nullptr;
  const int rc = Request::State::advance(in_flight, nullptr,
                                         Request::State::Until::all_stages_posted, call, failed);
  if (rc != MPI_SUCCESS) {
    check(rc, rank,
          (std::string(call) + " (" + (failed ? failed->op : "requests in flight") + ")").c_str());
  }
}

Request::Request() = default;
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    State::complete_quietly(state_);
    state_ = std::move(other.state_);
  }
  return *this;
}
Request::~Request() { State::complete_quietly(state_); }

Request Communicator::iallgatherv_raw(const void* send, std::span<const std::size_t> counts,
                                      void* recv, std::size_t elem_bytes) {
  Request r;
  r.state_ = std::make_unique<Request::State>("iallgatherv", impl_->in_flight);
  auto& st = *r.state_;
  auto layout = allgatherv_layout(counts, rank_, size_, elem_bytes, "MPI_Iallgatherv");
  st.mpi_counts = std::move(layout.counts);
  st.mpi_displs = std::move(layout.displs);
  st.traffic = {layout.bytes_sent, layout.bytes_received};
  MPI_Datatype t = impl_->element_type(elem_bytes);
  st.requests.push_back(MPI_REQUEST_NULL);
  impl_->check(MPI_Iallgatherv(send, st.mpi_counts[rank_], t, recv, st.mpi_counts.data(),
                               st.mpi_displs.data(), t, impl_->comm, &st.requests.back()),
               rank_, "MPI_Iallgatherv");
  return r;
}

namespace {
// Element counts of n blocks as even as possible (the first count % n one longer).
std::vector<std::size_t> even_blocks(std::size_t count, int n) {
  const auto parts = static_cast<std::size_t>(n);
  std::vector<std::size_t> blocks(parts, count / parts);
  for (std::size_t q = 0; q < count % parts; ++q) ++blocks[q];
  return blocks;
}
}  // namespace

namespace {
// Offsets of consecutive blocks; each block must fit one MPI message (int count).
std::vector<std::size_t> block_offsets_of(std::span<const std::size_t> counts, int rank,
                                          const char* op) {
  std::vector<std::size_t> offsets(counts.size());
  std::size_t offset = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    (void)checked_count(counts[q], rank, op);
    offsets[q] = offset;
    offset += counts[q];
  }
  return offsets;
}
std::string with_op(const char* call, const char* op) {
  return std::string(call) + " (" + op + ")";
}
}  // namespace

Request Communicator::iallreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op) {
  Request r;
  r.state_ = std::make_unique<Request::State>("iallreduce", impl_->in_flight);
  auto& st = *r.state_;
  st.block_counts = even_blocks(count, size_);
  st.block_offsets = block_offsets_of(st.block_counts, rank_, st.op);
  const std::size_t elem = size_of(type);
  const std::uint64_t per_way = (count + (size_ - 2) * st.block_counts[rank_]) * elem;
  if (size_ > 1) st.traffic = {per_way, per_way};
  const MPI_Datatype t = to_mpi(type);
  const MPI_Op mpi_op = to_mpi(op);
  const MPI_Comm c = impl_->comm;
  const int tag = impl_->next_request_tag();
  const int rank = rank_, size = size_;
  auto* bytes = static_cast<char*>(data);
  impl_->check(st.post_reduce_scatter(bytes, t, elem, rank, size, c, tag), rank_,
               "MPI_Isend/MPI_Irecv (iallreduce)");
  // This rank's block of `data` receives its reduction (it is not sent in the first stage), then
  // goes to every peer.
  st.next_stage_call = "MPI_Reduce_local/MPI_Isend/MPI_Irecv";
  st.next_stage = [=](Request::State& s) {
    const int rc =
        s.reduce_received(bytes + s.block_offsets[rank] * elem, t, mpi_op, elem, rank, size);
    return rc != MPI_SUCCESS ? rc : s.post_allgather(bytes, t, elem, rank, size, c, tag + 1);
  };
  return r;
}

Request Communicator::ireduce_scatter_raw(const void* send, std::size_t send_count,
                                          std::span<const std::size_t> counts, void* recv,
                                          std::size_t recv_count, DataType type, ReduceOp op) {
  const char* name = "ireduce_scatter";
  if (counts.size() != static_cast<std::size_t>(size_)) {
    throw CommError("rank " + std::to_string(rank_) + ": " + name + ": " +
                    std::to_string(counts.size()) + " counts for " + std::to_string(size_) +
                    " ranks");
  }
  Request r;
  r.state_ = std::make_unique<Request::State>(name, impl_->in_flight);
  auto& st = *r.state_;
  st.block_counts.assign(counts.begin(), counts.end());
  st.block_offsets = block_offsets_of(counts, rank_, name);
  const std::size_t total = st.block_offsets.back() + counts.back();
  const std::size_t mine = counts[rank_];
  if (send_count != total || recv_count < mine) {
    throw CommError("rank " + std::to_string(rank_) + ": " + name + ": send holds " +
                    std::to_string(send_count) + " elements for counts summing to " +
                    std::to_string(total) + ", recv holds " + std::to_string(recv_count) +
                    " for a block of " + std::to_string(mine));
  }
  const std::size_t elem = size_of(type);
  if (size_ > 1) st.traffic = {(total - mine) * elem, (size_ - 1) * mine * elem};
  const auto* send_bytes = static_cast<const char*>(send);
  auto* recv_bytes = static_cast<char*>(recv);
  if (mine > 0) std::memmove(recv_bytes, send_bytes + st.block_offsets[rank_] * elem, mine * elem);
  const MPI_Datatype t = to_mpi(type);
  const MPI_Op mpi_op = to_mpi(op);
  const int rank = rank_, size = size_;
  impl_->check(st.post_reduce_scatter(send_bytes, t, elem, rank, size, impl_->comm,
                                      impl_->next_request_tag()),
               rank_, "MPI_Isend/MPI_Irecv (ireduce_scatter)");
  st.next_stage_call = "MPI_Reduce_local";
  st.next_stage = [=](Request::State& s) {
    return s.reduce_received(recv_bytes, t, mpi_op, elem, rank, size);
  };
  return r;
}

Request Communicator::iallgather_raw(const void* send, std::size_t send_count, void* recv,
                                     std::size_t recv_count, std::size_t elem_bytes) {
  const char* name = "iallgather";
  if (recv_count != send_count * static_cast<std::size_t>(size_)) {
    throw CommError("rank " + std::to_string(rank_) + ": " + name + ": recv holds " +
                    std::to_string(recv_count) + " elements, not " + std::to_string(size_) +
                    " blocks of " + std::to_string(send_count));
  }
  Request r;
  r.state_ = std::make_unique<Request::State>(name, impl_->in_flight);
  auto& st = *r.state_;
  st.block_counts.assign(static_cast<std::size_t>(size_), send_count);
  st.block_offsets = block_offsets_of(st.block_counts, rank_, name);
  const std::uint64_t per_way = (size_ - 1) * send_count * elem_bytes;
  st.traffic = {per_way, per_way};
  auto* recv_bytes = static_cast<char*>(recv);
  if (send_count > 0) {
    std::memmove(recv_bytes + st.block_offsets[rank_] * elem_bytes, send, send_count * elem_bytes);
  }
  impl_->check(st.post_allgather(recv_bytes, impl_->element_type(elem_bytes), elem_bytes, rank_,
                                 size_, impl_->comm, impl_->next_request_tag()),
               rank_, "MPI_Isend/MPI_Irecv (iallgather)");
  return r;
}

void Communicator::finish(Request& request) {
  traffic_.bytes_sent += request.state_->traffic.bytes_sent;
  traffic_.bytes_received += request.state_->traffic.bytes_received;
  request.state_.reset();
}

void Communicator::check_owner(const Request& request, const char* call) const {
  if (request.state_->in_flight != &impl_->in_flight) {
    throw CommError("rank " + std::to_string(rank_) + ": " + call + " (" + request.state_->op +
                    "): the request belongs to another communicator");
  }
}

void Communicator::wait(Request& request) {
  const WatchedCall watched("wait (non-blocking operation)", rank_, size_, !impl_->owns_comm);
  if (!request.state_) return;
  check_owner(request, "wait");
  const char* call = nullptr;
  const Request::State* failed = nullptr;
  const int rc = Request::State::advance(impl_->in_flight, request.state_.get(),
                                         Request::State::Until::target_done, call, failed);
  if (rc != MPI_SUCCESS) {
    const std::string what = with_op(call, failed ? failed->op : request.state_->op);
    request.state_.reset();  // nothing left to wait for after an error
    impl_->check(rc, rank_, what.c_str());
  }
  finish(request);
}

void Communicator::progress(Request& request) {
#ifndef ATOLL_SMPI
  if (!request.state_) return;
  check_owner(request, "progress");
  const char* call = nullptr;
  const Request::State* failed = nullptr;
  const int rc = Request::State::advance(impl_->in_flight, request.state_.get(),
                                         Request::State::Until::one_pass, call, failed);
  if (rc != MPI_SUCCESS) {
    const std::string what = with_op(call, failed ? failed->op : request.state_->op);
    request.state_.reset();
    impl_->check(rc, rank_, what.c_str());
  }
  if (request.state_->done()) finish(request);
#else
  (void)request;
#endif
}

void Communicator::advance_stages() {
  if (impl_->in_flight.empty()) return;
#ifdef ATOLL_SMPI
  static const bool no_test_sleep =  // once per simulation (see the header)
      (simgrid::config::set_value<double>("smpi/test", 0.0), true);
  (void)no_test_sleep;
#endif
  const char* call = nullptr;
  const Request::State* failed = nullptr;
  const int rc = Request::State::advance(impl_->in_flight, nullptr, Request::State::Until::one_pass,
                                         call, failed);
  if (rc != MPI_SUCCESS) {
    impl_->check(rc, rank_, with_op(call, failed ? failed->op : "advance_stages").c_str());
  }
}

void Communicator::alltoall_raw(const void* send, void* recv, std::size_t bytes_each) {
  const WatchedCall watched("alltoall", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  MPI_Datatype t = impl_->element_type(bytes_each);
  if (exchange_point_to_point(size_)) {
    const std::vector<int> ones(static_cast<std::size_t>(size_), 1);
    std::vector<int> displs(ones.size());
    std::iota(displs.begin(), displs.end(), 0);
    impl_->check(exchange_linear(static_cast<const char*>(send), ones.data(), displs.data(),
                                 static_cast<char*>(recv), ones.data(), displs.data(), t,
                                 bytes_each, rank_, size_, impl_->comm),
                 rank_, "MPI_Isend/MPI_Irecv (alltoall)");
  } else {
    impl_->check(MPI_Alltoall(send, 1, t, recv, 1, t, impl_->comm), rank_, "MPI_Alltoall");
  }
  traffic_.bytes_sent += bytes_each * (size_ - 1);
  traffic_.bytes_received += bytes_each * (size_ - 1);
}

std::vector<std::size_t> Communicator::alltoallv_bounded_raw(
    const void* send, std::span<const std::size_t> send_counts,
    std::span<const std::size_t> send_offsets, std::span<const std::size_t> max_counts, void* recv,
    std::size_t recv_count, std::size_t elem_bytes) {
  const WatchedCall watched("bounded exchange", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const auto n = static_cast<std::size_t>(size_);
  const auto me = static_cast<std::size_t>(rank_);
  const std::string where = "rank " + std::to_string(rank_) + ": bounded exchange: ";
  std::size_t bound_total = 0;
  for (auto c : max_counts) bound_total += c;
  if (send_counts.size() != n || send_offsets.size() != n || max_counts.size() != n ||
      recv_count < bound_total) {
    throw CommError(where + std::to_string(send_counts.size()) + " send counts, " +
                    std::to_string(max_counts.size()) + " bounds for " + std::to_string(n) +
                    " ranks, room for " + std::to_string(recv_count) + " elements of " +
                    std::to_string(bound_total));
  }
  MPI_Datatype t = impl_->element_type(elem_bytes);
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  std::vector<std::size_t> offset(n, 0), counts(n, 0);
  for (std::size_t r = 1; r < n; ++r) offset[r] = offset[r - 1] + max_counts[r - 1];
  // Sent in full even when over a bound: the receivers' truncation errors end the call there.
  std::vector<MPI_Request> requests;
  requests.reserve(2 * (n - 1));
  for (std::size_t q = 0; q < n; ++q) {
    if (q == me) continue;
    requests.push_back(MPI_REQUEST_NULL);
    impl_->check(MPI_Irecv(out + offset[q] * elem_bytes,
                           checked_count(max_counts[q], rank_, "bounded exchange"), t,
                           static_cast<int>(q), kExchangeTag, impl_->comm, &requests.back()),
                 rank_, "MPI_Irecv (bounded exchange)");
  }
  for (std::size_t q = 0; q < n; ++q) {
    if (q == me) continue;
    requests.push_back(MPI_REQUEST_NULL);
    impl_->check(MPI_Isend(in + send_offsets[q] * elem_bytes,
                           checked_count(send_counts[q], rank_, "bounded exchange"), t,
                           static_cast<int>(q), kExchangeTag, impl_->comm, &requests.back()),
                 rank_, "MPI_Isend (bounded exchange)");
    traffic_.bytes_sent += send_counts[q] * elem_bytes;
  }
  std::vector<MPI_Status> status(requests.size());
  impl_->check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), status.data()),
               rank_, "MPI_Waitall (bounded exchange)");
  for (std::size_t q = 0, k = 0; q < n; ++q) {
    if (q == me) continue;
    int got = 0;
    impl_->check(MPI_Get_count(&status[k++], t, &got), rank_, "MPI_Get_count (bounded exchange)");
    counts[q] = static_cast<std::size_t>(got);
    traffic_.bytes_received += counts[q] * elem_bytes;
  }
  if (send_counts[me] > max_counts[me]) {
    throw CommError(where + "this rank's own block has " + std::to_string(send_counts[me]) +
                    " elements, over its bound of " + std::to_string(max_counts[me]));
  }
  if (send_counts[me] > 0) {
    std::memcpy(out + offset[me] * elem_bytes, in + send_offsets[me] * elem_bytes,
                send_counts[me] * elem_bytes);
  }
  counts[me] = send_counts[me];
  return counts;
}

void Communicator::alltoallv_raw(const void* send, std::span<const std::size_t> send_counts,
                                 void* recv, std::span<const std::size_t> recv_counts,
                                 std::size_t elem_bytes) {
  const WatchedCall watched("alltoallv", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const auto n = static_cast<std::size_t>(size_);
  if (send_counts.size() != n || recv_counts.size() != n) {
    throw CommError("rank " + std::to_string(rank_) +
                    ": alltoallv: " + std::to_string(send_counts.size()) + " send counts and " +
                    std::to_string(recv_counts.size()) + " receive counts for " +
                    std::to_string(n) + " ranks");
  }
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  std::size_t so = 0, ro = 0;
  for (std::size_t r = 0; r < n; ++r) {
    sc[r] = checked_count(send_counts[r], rank_, "MPI_Alltoallv");
    sd[r] = checked_count(so, rank_, "MPI_Alltoallv");
    rc[r] = checked_count(recv_counts[r], rank_, "MPI_Alltoallv");
    rd[r] = checked_count(ro, rank_, "MPI_Alltoallv");
    so += send_counts[r];
    ro += recv_counts[r];
    if (r != static_cast<std::size_t>(rank_)) {
      traffic_.bytes_sent += send_counts[r] * elem_bytes;
      traffic_.bytes_received += recv_counts[r] * elem_bytes;
    }
  }
  MPI_Datatype t = impl_->element_type(elem_bytes);
  if (exchange_point_to_point(size_)) {
    impl_->check(exchange_linear(static_cast<const char*>(send), sc.data(), sd.data(),
                                 static_cast<char*>(recv), rc.data(), rd.data(), t, elem_bytes,
                                 rank_, size_, impl_->comm),
                 rank_, "MPI_Isend/MPI_Irecv (alltoallv)");
  } else {
    impl_->check(
        MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, impl_->comm),
        rank_, "MPI_Alltoallv");
  }
}

void Communicator::sendrecv_raw(const void* send, std::size_t send_bytes, int dest, void* recv,
                                std::size_t recv_bytes, int source) {
  const WatchedCall watched("sendrecv", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  std::size_t sent = 0, received = 0;
  // At least one exchange even for empty buffers, so that both sides pair up.
  do {
    const std::size_t sn = std::min(kChunkBytes, send_bytes - sent);
    const std::size_t rn = std::min(kChunkBytes, recv_bytes - received);
    impl_->check(
        MPI_Sendrecv(s + sent, static_cast<int>(sn), MPI_BYTE, dest, 0, r + received,
                     static_cast<int>(rn), MPI_BYTE, source, 0, impl_->comm, MPI_STATUS_IGNORE),
        rank_, "MPI_Sendrecv");
    sent += sn;
    received += rn;
  } while (sent < send_bytes || received < recv_bytes);
  if (dest != rank_) traffic_.bytes_sent += send_bytes;
  if (source != rank_) traffic_.bytes_received += recv_bytes;
}

void Communicator::send_raw(const void* data, std::size_t bytes, int dest) {
  const WatchedCall watched("send", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  const auto* p = static_cast<const char*>(data);
  std::size_t done = 0;
  do {
    const std::size_t n = std::min(kChunkBytes, bytes - done);
    impl_->check(MPI_Send(p + done, static_cast<int>(n), MPI_BYTE, dest, 1, impl_->comm), rank_,
                 "MPI_Send");
    done += n;
  } while (done < bytes);
  traffic_.bytes_sent += bytes;
}

void Communicator::recv_raw(void* data, std::size_t bytes, int source) {
  const WatchedCall watched("recv", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  auto* p = static_cast<char*>(data);
  std::size_t done = 0;
  do {
    const std::size_t n = std::min(kChunkBytes, bytes - done);
    impl_->check(MPI_Recv(p + done, static_cast<int>(n), MPI_BYTE, source, 1, impl_->comm,
                          MPI_STATUS_IGNORE),
                 rank_, "MPI_Recv");
    done += n;
  } while (done < bytes);
  traffic_.bytes_received += bytes;
}

void Communicator::broadcast_raw(void* data, std::size_t bytes, int root) {
  const WatchedCall watched("broadcast", rank_, size_, !impl_->owns_comm);
  impl_->post_pending_stages(rank_);
  auto* p = static_cast<char*>(data);
  for (std::size_t done = 0; done < bytes; done += kChunkBytes) {
    const std::size_t n = std::min(kChunkBytes, bytes - done);
    impl_->check(MPI_Bcast(p + done, static_cast<int>(n), MPI_BYTE, root, impl_->comm), rank_,
                 "MPI_Bcast");
  }
  if (size_ > 1) {
    if (rank_ == root)
      traffic_.bytes_sent += bytes;
    else
      traffic_.bytes_received += bytes;
  }
}

void Communicator::agree(const std::optional<std::string>& local_error) {
  const WatchedCall watched("agree (error check)", rank_, size_, !impl_->owns_comm);
  const int mine = local_error ? rank_ : size_;
  const int first = allreduce_value<std::int32_t>(mine, ReduceOp::min);
  if (first == size_) return;
  std::uint64_t length = rank_ == first ? local_error->size() : 0;
  broadcast<std::uint64_t>(std::span<std::uint64_t>(&length, 1), first);
  std::string text = rank_ == first ? *local_error : std::string(length, '\0');
  broadcast<char>(std::span<char>(text.data(), text.size()), first);
  throw CollectiveError("rank " + std::to_string(first) + ": " + text);
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(argc, argv);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiRuntime::abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace atl::comm
