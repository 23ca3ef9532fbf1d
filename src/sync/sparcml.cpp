// SparCML's sparse allreduce (Renggli et al., SC'19), SSAR recursive doubling:
// log2(p) rounds; in round i, swap the accumulated gradient with rank XOR 2^i and merge-sum. Once
// the sparse form would exceed `sparcml_dense_switch` · 4M bytes the accumulator turns dense
// (δ in the paper). World sizes that are not a power of two fold the extra ranks r >= p onto r - p
// first and send them the result at the end.
// Cost (Eq. 2 of Zen): T = Σ_{i=1..log n} γ_{2^{i-1}} · d·M·(sizeof(Index)+4) / b, + log2(n)·α.
#include <bit>

#include "atoll/comm/charged_work.h"
#include "common.h"
#include "schemes.h"
#include "sparcml_message.h"

namespace atl::sync {
namespace {

template <class Index>
using Accumulator = SparcmlAccumulator<Index>;

// The message codec and the merge, each a ChargedWork (cpu_costs.h): sparse work counts entries,
// dense work the M floats it touches.
template <class Index>
std::vector<std::uint8_t> encode(Communicator& comm, const Accumulator<Index>& a, std::uint64_t M) {
  static const auto op = comm::cpu_op_id("sparcml.encode");
  comm::ChargedWork work(comm, op, a.dense ? 0.0 : static_cast<double>(a.idx.size()),
                         a.dense ? 4.0 * static_cast<double>(M) : 0.0);
  return sparcml_encode(a);
}

template <class Index>
Accumulator<Index> decode(Communicator& comm, std::span<const std::uint8_t> bytes, std::uint64_t M,
                          int sender) {
  static const auto op = comm::cpu_op_id("sparcml.decode");
  comm::ChargedWork work(comm, op, 0);
  auto a = sparcml_decode<Index>(bytes, M, sender);
  work.set_size(a.dense ? 0.0 : static_cast<double>(a.idx.size()),
                a.dense ? 4.0 * static_cast<double>(M) : 0.0);
  return a;
}

template <class Index>
void accumulate(Communicator& comm, Accumulator<Index>& mine, Accumulator<Index>&& other,
                std::uint64_t M, double dense_switch) {
  // Sparse entries merged or scattered, and one pass over M floats per dense operand or
  // conversion to dense.
  static const auto op = comm::cpu_op_id("sparcml.accumulate");
  const bool was_dense = mine.dense;
  const double items = static_cast<double>((mine.dense ? 0 : mine.idx.size()) +
                                           (other.dense ? 0 : other.idx.size()));
  const double passes = other.dense ? 1.0 : 0.0;
  comm::ChargedWork work(comm, op, items);
  sparcml_accumulate(mine, std::move(other), M, dense_switch);
  work.set_size(items, 4.0 * static_cast<double>(M) * (passes + (mine.dense && !was_dense)));
}

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
        const auto bytes = encode(comm, acc, M);
        const std::uint64_t size = bytes.size();
        comm.send<std::uint64_t>(std::span(&size, 1), rank - p);
        comm.send<std::uint8_t>(bytes, rank - p);
      }
      PhaseScope phase(comm, out.stats, "unfold");
      std::uint64_t size = 0;
      comm.recv<std::uint64_t>(std::span(&size, 1), rank - p);
      std::vector<std::uint8_t> bytes(sparcml_checked_size<Index>(size, M, rank - p));
      comm.recv<std::uint8_t>(bytes, rank - p);
      acc = decode<Index>(comm, bytes, M, rank - p);
    } else {
      if (rank + p < n) {
        PhaseScope phase(comm, out.stats, "fold");
        std::uint64_t size = 0;
        comm.recv<std::uint64_t>(std::span(&size, 1), rank + p);
        std::vector<std::uint8_t> bytes(sparcml_checked_size<Index>(size, M, rank + p));
        comm.recv<std::uint8_t>(bytes, rank + p);
        accumulate(comm, acc, decode<Index>(comm, bytes, M, rank + p), M, dense_switch_);
      }
      {
        PhaseScope phase(comm, out.stats, "recursive_doubling");
        for (int mask = 1; mask < p; mask <<= 1) {
          const int partner = rank ^ mask;
          const auto mine = encode(comm, acc, M);
          const auto theirs = comm.sendrecv_sized<std::uint8_t>(mine, partner, partner);
          accumulate(comm, acc, decode<Index>(comm, theirs, M, partner), M, dense_switch_);
        }
      }
      if (rank + p < n) {
        PhaseScope phase(comm, out.stats, "unfold");
        const auto bytes = encode(comm, acc, M);
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
