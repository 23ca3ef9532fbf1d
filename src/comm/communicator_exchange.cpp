// The communicator's personalised exchanges (alltoall, alltoallv and its bounded form) and
// point-to-point transfers (sendrecv, send, recv, broadcast), chunked where a buffer exceeds one
// MPI message.
#include <mpi.h>

#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/comm/watchdog.h"
#include "mpi_impl.h"

namespace atl::comm {
using namespace detail;

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

}  // namespace atl::comm
