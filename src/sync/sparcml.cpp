// SparCML's sparse allreduce (Renggli et al., SC'19), SSAR recursive doubling:
// log2(p) rounds; in round i, swap the accumulated gradient with rank XOR 2^i and merge-sum. Once
// the sparse form would exceed `sparcml_dense_switch` · 4M bytes the accumulator turns dense
// (δ in the paper). World sizes that are not a power of two fold the extra ranks r >= p onto r - p
// first and send them the result at the end.
// Cost (Eq. 2 of Zen): T = Σ_{i=1..log n} γ_{2^{i-1}} · d·M·(sizeof(Index)+4) / b, + log2(n)·α.
#include <bit>

#include "common.h"
#include "schemes.h"
#include "sparcml_message.h"

namespace atl::sync {
namespace {

template <class Index>
using Accumulator = SparcmlAccumulator<Index>;

class SparcmlScheme final : public SchemeBase<SparcmlScheme> {
 public:
  explicit SparcmlScheme(const SchemeOptions& o) : dense_switch_(o.sparcml_dense_switch) {}
  std::string_view name() const override { return "sparcml"; }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    // Dense once the merged COO passes the switch: accumulator, encoded copy, received copy and
    // its decoding, M floats each.
    const double merged_bytes = static_cast<double>(n) * static_cast<double>(nnz) * 12;
    return merged_bytes > dense_switch_ * 4.0 * static_cast<double>(M) ? 16 * M : 0;
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    const int n = comm.size(), rank = comm.rank();
    const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
    Accumulator<Index> acc{false, grad.indices, grad.values};
    const std::uint64_t M = grad.elements;
    if (rank >= p) {  // fold: hand my gradient to rank - p, wait for the result
      {
        PhaseScope phase(comm, out.stats, "fold");
        const auto bytes = sparcml_encode(acc);
        const std::uint64_t size = bytes.size();
        comm.send<std::uint64_t>(std::span(&size, 1), rank - p);
        comm.send<std::uint8_t>(bytes, rank - p);
      }
      PhaseScope phase(comm, out.stats, "unfold");
      std::uint64_t size = 0;
      comm.recv<std::uint64_t>(std::span(&size, 1), rank - p);
      std::vector<std::uint8_t> bytes(sparcml_checked_size<Index>(size, M, rank - p));
      comm.recv<std::uint8_t>(bytes, rank - p);
      acc = sparcml_decode<Index>(bytes, M, rank - p);
    } else {
      if (rank + p < n) {
        PhaseScope phase(comm, out.stats, "fold");
        std::uint64_t size = 0;
        comm.recv<std::uint64_t>(std::span(&size, 1), rank + p);
        std::vector<std::uint8_t> bytes(sparcml_checked_size<Index>(size, M, rank + p));
        comm.recv<std::uint8_t>(bytes, rank + p);
        sparcml_accumulate(acc, sparcml_decode<Index>(bytes, M, rank + p), M, dense_switch_);
      }
      {
        PhaseScope phase(comm, out.stats, "recursive_doubling");
        for (int mask = 1; mask < p; mask <<= 1) {
          const int partner = rank ^ mask;
          const auto mine = sparcml_encode(acc);
          const auto theirs = comm.sendrecv_sized<std::uint8_t>(mine, partner, partner);
          sparcml_accumulate(acc, sparcml_decode<Index>(theirs, M, partner), M, dense_switch_);
        }
      }
      if (rank + p < n) {
        PhaseScope phase(comm, out.stats, "unfold");
        const auto bytes = sparcml_encode(acc);
        const std::uint64_t size = bytes.size();
        comm.send<std::uint64_t>(std::span(&size, 1), rank + p);
        comm.send<std::uint8_t>(bytes, rank + p);
      }
    }
    out.dense_form = acc.dense;
    if (acc.dense) {
      out.dense = std::move(acc.val);
    } else {
      out.sparse.elements = M;
      out.sparse.indices = std::move(acc.idx);
      out.sparse.values = std::move(acc.val);
    }
  }

 private:
  double dense_switch_;
};

}  // namespace

std::unique_ptr<SyncScheme> make_sparcml(const SchemeOptions& o) {
  return std::make_unique<SparcmlScheme>(o);
}

}  // namespace atl::sync
