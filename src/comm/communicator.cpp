// The communicator: creation (world, split, subgroup), the blocking collectives, computation
// charging and the MPI runtime. Non-blocking operations: communicator_requests.cpp; personalised
// exchanges and point-to-point: communicator_exchange.cpp; shared MPI helpers: mpi_helpers.cpp
// (mpi_impl.h). Compiled once against Open MPI and once against SimGrid SMPI (whose mpi.h comes
// first on the include path for that flavour).
#include "atoll/comm/communicator.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "atoll/comm/cpu_costs.h"
#include "atoll/comm/watchdog.h"
#include "mpi_impl.h"
#include "request_state.h"

#ifdef ATOLL_SMPI
#include <xbt/config.hpp>
#endif

namespace atl::comm {
using namespace detail;

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
