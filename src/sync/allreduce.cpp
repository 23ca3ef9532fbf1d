// Dense AllReduce: densify, MPI_Allreduce (sum), return the dense tensor.
// Cost (ring, bandwidth-optimal): 2(n-1) messages, 2(n-1)/n · 4M bytes sent and received per rank.
#include "atoll/comm/charged_work.h"
#include "common.h"
#include "schemes.h"

namespace atl::sync {
namespace {

class AllreduceScheme final : public SchemeBase<AllreduceScheme> {
 public:
  std::string_view name() const override { return "allreduce"; }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    (void)n, (void)nnz;
    return 4 * M;  // the dense sum
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    out.dense_form = true;
    {
      PhaseScope phase(comm, out.stats, "densify");
      static const auto op = comm::cpu_op_id("allreduce.densify");
      comm::ChargedWork work(comm, op, static_cast<double>(grad.nnz()), 4.0 * grad.elements);
      out.dense.assign(grad.elements, 0.0f);
      for (std::size_t i = 0; i < grad.nnz(); ++i) out.dense[grad.indices[i]] = grad.values[i];
    }
    {
      PhaseScope phase(comm, out.stats, "allreduce");
      comm.allreduce(std::span<float>(out.dense), comm::ReduceOp::sum);
    }
  }
};

}  // namespace

std::unique_ptr<SyncScheme> make_allreduce(const SchemeOptions&) {
  return std::make_unique<AllreduceScheme>();
}

}  // namespace atl::sync
