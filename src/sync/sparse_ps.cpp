// Sparse parameter server: rank r serves the contiguous range [r·M/n, (r+1)·M/n). Workers push the
// COO entries of each range to its server, servers sum them, and every worker pulls every range's
// summed COO. Skew (hot indices are small ids) makes the first range's server the bottleneck.
// Cost: Zen's Eq. 1 multiplied by the skew s of the aggregated load: s · (n-1)/n · (γ_n+1)·d·M·8 /
// b.
#include "atoll/comm/charged_work.h"
#include "common.h"
#include "received_entries.h"
#include "schemes.h"

namespace atl::sync {
namespace {

class SparsePsScheme final : public SchemeBase<SparsePsScheme> {
 public:
  std::string_view name() const override { return "sparse_ps"; }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    // A server's slot sums over its range (M/n floats) where it could receive one entry per 16.
    const std::uint64_t slots = M / static_cast<std::uint64_t>(n) + 1;
    return static_cast<double>(n) * static_cast<double>(nnz) * 16 >= static_cast<double>(slots)
               ? 4 * slots
               : 0;
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    const auto n = static_cast<std::uint32_t>(comm.size());
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const std::uint64_t M = grad.elements;
    std::vector<Entry<Index>> entries;
    std::vector<std::size_t> send_counts(n);
    {
      PhaseScope phase(comm, out.stats, "partition");
      static const auto op = comm::cpu_op_id("sparse_ps.partition");
      comm::ChargedWork work(comm, op, static_cast<double>(grad.nnz()));
      // Sorted indices: each range's entries are a contiguous slice.
      std::size_t begin = 0;
      for (std::uint32_t r = 0; r < n; ++r) {
        const auto end_index = range_begin(M, n, r + 1);
        const auto end = static_cast<std::size_t>(
            std::lower_bound(grad.indices.begin() + begin, grad.indices.end(), end_index) -
            grad.indices.begin());
        send_counts[r] = end - begin;
        begin = end;
      }
      entries = to_entries<Index>(grad.indices, grad.values);
    }
    std::vector<Entry<Index>> received;
    {
      PhaseScope phase(comm, out.stats, "push");
      const auto recv_counts = comm.alltoall<std::size_t>(send_counts);
      std::size_t total = 0;
      for (auto c : recv_counts) total += c;
      received.resize(total);
      comm.alltoallv<Entry<Index>>(entries, send_counts, received, recv_counts);
      static const auto op = comm::cpu_op_id("sparse_ps.check_push");
      comm::ChargedWork work(comm, op, static_cast<double>(received.size()));
      sparse_ps_check_push<Index>(M, n, rank, received, recv_counts);
      out.stats.push_load_bytes = (total - recv_counts[rank]) * sizeof(Entry<Index>);
    }
    std::vector<Entry<Index>> summed;
    {
      PhaseScope phase(comm, out.stats, "aggregate");
      static const auto op = comm::cpu_op_id("sparse_ps.aggregate");
      comm::ChargedWork work(
          comm, op, static_cast<double>(received.size()),
          4.0 * static_cast<double>(range_begin(M, n, rank + 1) - range_begin(M, n, rank)));
      std::vector<Index> idx;
      std::vector<float> val;
      sum_own_range<Index>(received, M, n, rank, idx, val);
      summed = to_entries<Index>(idx, val);
      out.stats.pull_load_bytes = summed.size() * sizeof(Entry<Index>) * (n - 1);
    }
    {
      PhaseScope phase(comm, out.stats, "pull");
      std::vector<std::size_t> counts;
      const auto all = comm.allgatherv<Entry<Index>>(summed, &counts);
      // Ranges are in rank order, so the concatenation is sorted.
      static const auto op = comm::cpu_op_id("sparse_ps.decode");
      comm::ChargedWork work(comm, op, static_cast<double>(all.size()));
      sparse_ps_check_pull<Index>(M, all, counts);
      out.dense_form = false;
      out.sparse.elements = M;
      out.sparse.indices.resize(all.size());
      out.sparse.values.resize(all.size());
      for (std::size_t k = 0; k < all.size(); ++k) {
        out.sparse.indices[k] = all[k].index;
        out.sparse.values[k] = all[k].value;
      }
    }
  }
};

}  // namespace

std::unique_ptr<SyncScheme> make_sparse_ps(const SchemeOptions&) {
  return std::make_unique<SparsePsScheme>();
}

}  // namespace atl::sync
