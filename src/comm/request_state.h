// One non-blocking operation's state (Request::State), shared by the communicator's translation
// units (mpi_impl.h). Only src/comm/ includes this header.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::comm {

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

}  // namespace atl::comm
