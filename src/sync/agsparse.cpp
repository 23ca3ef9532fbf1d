// AGsparse: allgather every worker's COO, then every worker sums all n contributions into a dense
// tensor (as Horovod/PyTorch do with index_add_).
// Cost: every rank receives Σ_{j≠i} nnz_j · (sizeof(Index) + 4) bytes ≈ (n-1)·d·M·8: linear in n.
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
      const auto mine = to_entries<Index>(grad.indices, grad.values);
      std::vector<std::size_t> counts;
      all = comm.allgatherv<Entry<Index>>(mine, &counts);
      agsparse_check_entries<Index>(grad.elements, all, counts);
    }
    {
      PhaseScope phase(comm, out.stats, "sum");
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
