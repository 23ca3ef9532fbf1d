// The communicator's MPI side, shared by its translation units (communicator.cpp: creation and
// blocking collectives; communicator_requests.cpp: non-blocking operations;
// communicator_exchange.cpp: personalised exchanges and point-to-point; mpi_helpers.cpp: the
// helpers below). Only src/comm/ includes this header, hence <mpi.h>: each of these files is
// compiled twice, against Open MPI and against SimGrid SMPI (whose mpi.h comes first on the
// include path for that flavour).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::comm {
namespace detail {

MPI_Datatype to_mpi(DataType t);
MPI_Op to_mpi(ReduceOp op);
std::size_t size_of(DataType t);
// MPI counts are int: anything larger is an error we name rather than a silent truncation.
int checked_count(std::size_t count, int rank, const char* op);

// Largest block moved by one point-to-point or broadcast call (bytes); bigger buffers are chunked.
constexpr std::size_t kChunkBytes = std::size_t{1} << 30;

// Message tags: 0 sendrecv, 1 send/recv, kExchangeTag the point-to-point alltoall(v) (see
// exchange_point_to_point); from kFirstRequestTag on, two per non-blocking request (one per stage),
// kRequestTagWindow requests before they repeat (MPI guarantees tags <= 32767).
constexpr int kExchangeTag = 2;
constexpr int kFirstRequestTag = 3;
constexpr int kRequestTagWindow = 16000;

bool mpi_finalized();
// Ranks of `comm` on this rank's node (MPI_COMM_TYPE_SHARED); under SMPI every simulated rank
// lives in one process, so all of them.
int ranks_on_node_of(MPI_Comm comm, int rank, int size);
// Whether alltoall and alltoallv run as exchange_linear instead of MPI_Alltoall(v) (under SMPI at
// world sizes that are not powers of two: mpi_helpers.cpp says why).
bool exchange_point_to_point(int size);
// Personalised exchange by point-to-point messages, as Open MPI's basic_linear alltoallv does it
// (mpi_helpers.cpp). Counts and displacements in elements of `t` (`elem_bytes` each). Returns an
// MPI error code.
int exchange_linear(const char* send, const int* send_counts, const int* send_displs, char* recv,
                    const int* recv_counts, const int* recv_displs, MPI_Datatype t,
                    std::size_t elem_bytes, int rank, int size, MPI_Comm comm);

// MPI's int counts and displacements of an allgatherv, and the bytes the ring algorithm moves for
// this rank (every block but its own arrives; every block but its successor's leaves).
struct AllgathervLayout {
  std::vector<int> counts, displs;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
};
AllgathervLayout allgatherv_layout(std::span<const std::size_t> counts, int rank, int size,
                                   std::size_t elem_bytes, const char* op);

}  // namespace detail

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
    const auto seq = static_cast<int>(requests_posted++ % detail::kRequestTagWindow);
    return detail::kFirstRequestTag + 2 * seq;
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

}  // namespace atl::comm
