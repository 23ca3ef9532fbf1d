// AGsparse: allgather every worker's COO, then every worker sums all n contributions into a dense
// tensor (as Horovod/PyTorch do with index_add_).
// Cost: every rank receives Σ_{j≠i} nnz_j · (sizeof(Index) + 4) bytes ≈ (n-1)·d·M·8: linear in n.
#include "atoll/comm/charged_work.h"
#include "common.h"
#include "received_entries.h"
#include "schemes.h"

namespace atl::sync {
namespace {

class AgsparseScheme final : public SchemeBase<AgsparseScheme> {
 public:
  std::string_view name() const override { return "agsparse"; }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    (void)n, (void)nnz;
    return 4 * M;  // the dense sum
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    out.dense_form = true;
    std::vector<Entry<Index>> all;
    {
      PhaseScope phase(comm, out.stats, "allgather");
      static const auto encode_op = comm::cpu_op_id("agsparse.encode");
      static const auto check_op = comm::cpu_op_id("agsparse.check");
      std::vector<Entry<Index>> mine;
      {
        comm::ChargedWork work(comm, encode_op, static_cast<double>(grad.nnz()));
        mine = to_entries<Index>(grad.indices, grad.values);
      }
      std::vector<std::size_t> counts;
      all = comm.allgatherv<Entry<Index>>(mine, &counts);
      comm::ChargedWork work(comm, check_op, static_cast<double>(all.size()));
      agsparse_check_entries<Index>(grad.elements, all, counts);
    }
    {
      PhaseScope phase(comm, out.stats, "sum");
      static const auto op = comm::cpu_op_id("agsparse.sum");
      comm::ChargedWork work(comm, op, static_cast<double>(all.size()), 4.0 * grad.elements);
      out.dense.assign(grad.elements, 0.0f);
      for (const auto& e : all) out.dense[e.index] += e.value;
    }
  }
};

}  // namespace

std::unique_ptr<SyncScheme> make_agsparse(const SchemeOptions&) {
  return std::make_unique<AgsparseScheme>();
}

}  // namespace atl::sync
