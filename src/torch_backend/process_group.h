// The "atoll" torch.distributed backend (docs/pytorch.md): a c10d::ProcessGroup over atoll's
// communicator layer. allreduce of a dense tensor is MPI's allreduce; of a sparse COO tensor, the
// chosen sparse scheme (zen by default, any of make_scheme's names or auto). broadcast, allgather
// and barrier map to the communicator's; every other collective raises NotImplementedError naming
// it. Every call first checks, over the group, that all ranks made the same call (collective,
// tensor kind, dtype and shape, op or root, sparse scheme) and that none found its own arguments
// wrong: otherwise the same clear error on every rank, never a hang or a wrong sum. Results are
// written as data only (no autograd in-place check or history change, as Gloo's writes). Work
// runs in the calling thread and is complete when the call returns; every MPI call of the process
// holds one lock (mpi_mutex): MPI runs at MPI_THREAD_SERIALIZED and torch may call from any
// thread. Private to the atoll_torch module.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"

namespace atl::torch_backend {

// The collectives the backend runs (the argument check compares them across ranks).
enum class Collective : std::int64_t { allreduce, broadcast, allgather, allgather_base, barrier };

// What the last sparse allreduce did, and totals since the group was made.
struct BackendStats {
  std::string scheme;  // the scheme set for sparse tensors
  std::string chosen;  // the scheme that ran the last sparse call (auto: its pick)
  std::uint64_t sparse_calls = 0, dense_calls = 0;
  // The last sparse call: elements M, input blocks (rows) and their elements on this rank (Zen
  // sends one index per row, the other schemes one per element), result elements; seconds in the
  // scheme and in the tensor conversions around it (both max over ranks would need a collective:
  // these are this rank's).
  std::uint64_t elements = 0, blocks = 0, nnz = 0, result_nnz = 0;
  double sync_s = 0, convert_s = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::vector<sync::PhaseStats> phases;
};

class ProcessGroupAtoll : public c10d::ProcessGroup {
 public:
  ProcessGroupAtoll(comm::Communicator comm, std::chrono::milliseconds timeout);
  ~ProcessGroupAtoll() override;

  // MPI's thread level (MPI_THREAD_SERIALIZED) and the watchdog are the process's: every MPI call
  // of the module, on any group, holds this lock.
  static std::mutex& mpi_mutex();

  const std::string getBackendName() const override { return "atoll"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Not supported: NotImplementedError naming the collective.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // The scheme for sparse tensors (make_scheme's names; std::invalid_argument naming the valid
  // ones). Local: every rank of the group must set the same one before its next sparse call.
  void set_sparse_scheme(const std::string& name);
  BackendStats stats() const;

 private:
  void allreduce_sparse(at::Tensor& tensor);
  template <class Index>
  void allreduce_sparse_as(at::Tensor& tensor);
  void allreduce_dense(at::Tensor& tensor, const c10d::ReduceOp& op);
  // Collective: every rank's (kind, dtype, shape) of `t` for `op`; c10::Error naming the first
  // rank that differs from rank 0, on every rank.
  // Collective: every rank's call (which collective, the tensor's kind, dtype and shape, `extra`
  // named `extra_name`, e.g. the op or the root, and the sparse scheme's index or -1) against rank
  // 0's; c10::Error naming the first rank that differs, on every rank. `problem`: what this rank
  // found wrong with its own arguments (raised on every rank). `t`: null for a barrier.
  void check_same_call(Collective c, const at::Tensor* t, const std::optional<std::string>& problem,
                       const char* extra_name, std::int64_t extra, std::int64_t scheme);

  comm::Communicator comm_;
  std::unique_ptr<sync::SyncScheme> scheme_;
  std::int64_t scheme_index_ = -1;  // in sync::scheme_names()
  // Per index width: the input gradient and the result, kept across calls (their buffers reused).
  template <class Index>
  struct Buffers {
    sparse::SparseGradient<Index> grad;
    sync::SyncResult<Index> result;
  };
  Buffers<std::uint32_t> buffers32_;
  Buffers<std::uint64_t> buffers64_;
  BackendStats stats_;
};

}  // namespace atl::torch_backend
