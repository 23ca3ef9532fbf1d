// The communicator's MPI helpers (mpi_impl.h): type and operation mapping, counts, the ranks on
// a node, the point-to-point personalised exchange and allgatherv's layout.
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

#include "mpi_impl.h"

namespace atl::comm::detail {

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

int checked_count(std::size_t count, int rank, const char* op) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw CommError("rank " + std::to_string(rank) + ": " + op + ": count " +
                    std::to_string(count) + " exceeds the MPI limit of INT_MAX elements");
  }
  return static_cast<int>(count);
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

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

}  // namespace atl::comm::detail
