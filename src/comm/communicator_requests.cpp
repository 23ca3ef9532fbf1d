// The communicator's non-blocking operations (include/atoll/comm/communicator.h, Request): posting
// iallgatherv, iallreduce, ireduce_scatter and iallgather, and completing them (wait, progress,
// advance_stages) through Request::State's progress engine (request_state.h).
#include <mpi.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/comm/watchdog.h"
#include "mpi_impl.h"
#include "request_state.h"

#ifdef ATOLL_SMPI
#include <xbt/config.hpp>
#endif

namespace atl::comm {
using namespace detail;

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

}  // namespace atl::comm
