// The only translation unit that includes <mpi.h>. Compiled once against Open MPI and once against
// SimGrid SMPI (whose mpi.h comes first on the include path for that flavour).
#include "atoll/comm/communicator.h"

#include <mpi.h>

#include <climits>
#include <string>

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

}  // namespace

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  // Contiguous element types of a given byte size, created on demand, freed with the Impl.
  std::vector<std::pair<std::size_t, MPI_Datatype>> element_types;

  ~Impl() {
    for (auto& [bytes, type] : element_types) MPI_Type_free(&type);
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
  c.ranks_on_node_ = size;
#ifndef ATOLL_SMPI
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &c.ranks_on_node_);
    MPI_Comm_free(&node);
  }
#endif
  return c;
}

Communicator::Communicator(std::unique_ptr<Impl> impl, int rank, int size)
    : impl_(std::move(impl)), rank_(rank), size_(size) {}
Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

double Communicator::wtime() const { return MPI_Wtime(); }

void Communicator::barrier() { impl_->check(MPI_Barrier(impl_->comm), rank_, "MPI_Barrier"); }

void Communicator::allreduce_raw(void* data, std::size_t count, DataType type, ReduceOp op) {
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
  const auto l = allgatherv_layout(counts, rank_, size_, elem_bytes, "MPI_Allgatherv");
  MPI_Datatype t = impl_->element_type(elem_bytes);
  impl_->check(MPI_Allgatherv(send, l.counts[rank_], t, recv, l.counts.data(), l.displs.data(), t,
                              impl_->comm),
               rank_, "MPI_Allgatherv");
  traffic_.bytes_received += l.bytes_received;
  traffic_.bytes_sent += l.bytes_sent;
}

#ifdef ATOLL_SMPI
bool Communicator::simulated() { return true; }
void Communicator::fixed_compute_begin() { smpi_bench_end(); }  // charges what ran so far
void Communicator::fixed_compute_end(double seconds) {
  smpi_execute(seconds);
  smpi_bench_begin();
}
#else
bool Communicator::simulated() { return false; }
void Communicator::fixed_compute_begin() {}
void Communicator::fixed_compute_end(double) {}
#endif

struct Request::State {
  MPI_Request request = MPI_REQUEST_NULL;
  AllgathervLayout layout;  // its count arrays must outlive the operation
};

Request::Request() = default;
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (state_) MPI_Wait(&state_->request, MPI_STATUS_IGNORE);
    state_ = std::move(other.state_);
  }
  return *this;
}
Request::~Request() {
  if (state_) MPI_Wait(&state_->request, MPI_STATUS_IGNORE);
}

Request Communicator::iallgatherv_raw(const void* send, std::span<const std::size_t> counts,
                                      void* recv, std::size_t elem_bytes) {
  Request r;
  r.state_ = std::make_unique<Request::State>();
  auto& st = *r.state_;
  st.layout = allgatherv_layout(counts, rank_, size_, elem_bytes, "MPI_Iallgatherv");
  MPI_Datatype t = impl_->element_type(elem_bytes);
  impl_->check(MPI_Iallgatherv(send, st.layout.counts[rank_], t, recv, st.layout.counts.data(),
                               st.layout.displs.data(), t, impl_->comm, &st.request),
               rank_, "MPI_Iallgatherv");
  return r;
}

void Communicator::wait(Request& request) {
  if (!request.state_) return;
  auto state = std::move(request.state_);
  impl_->check(MPI_Wait(&state->request, MPI_STATUS_IGNORE), rank_, "MPI_Wait (iallgatherv)");
  traffic_.bytes_sent += state->layout.bytes_sent;
  traffic_.bytes_received += state->layout.bytes_received;
}

void Communicator::progress(Request& request) {
#ifndef ATOLL_SMPI
  if (!request.state_) return;
  int done = 0;
  impl_->check(MPI_Test(&request.state_->request, &done, MPI_STATUS_IGNORE), rank_,
               "MPI_Test (iallgatherv)");
  if (done) {
    // Completed: account its traffic now; wait() then has nothing left to do.
    traffic_.bytes_sent += request.state_->layout.bytes_sent;
    traffic_.bytes_received += request.state_->layout.bytes_received;
    request.state_.reset();
  }
#else
  (void)request;
#endif
}

void Communicator::alltoall_raw(const void* send, void* recv, std::size_t bytes_each) {
  MPI_Datatype t = impl_->element_type(bytes_each);
  impl_->check(MPI_Alltoall(send, 1, t, recv, 1, t, impl_->comm), rank_, "MPI_Alltoall");
  traffic_.bytes_sent += bytes_each * (size_ - 1);
  traffic_.bytes_received += bytes_each * (size_ - 1);
}

void Communicator::alltoallv_raw(const void* send, std::span<const std::size_t> send_counts,
                                 void* recv, std::span<const std::size_t> recv_counts,
                                 std::size_t elem_bytes) {
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
  impl_->check(
      MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, impl_->comm),
      rank_, "MPI_Alltoallv");
}

void Communicator::sendrecv_raw(const void* send, std::size_t send_bytes, int dest, void* recv,
                                std::size_t recv_bytes, int source) {
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
