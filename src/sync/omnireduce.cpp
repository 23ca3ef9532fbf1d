// OmniReduce (Fei et al., SIGCOMM'21), block-sparse: the tensor is cut into blocks of B elements
// (default 256); only blocks holding a non-zero travel, each tagged with its block id, no
// per-element indices. Aggregator r (co-located with worker r) owns a contiguous range of blocks,
// sums what it receives and sends the summed non-zero blocks back to every worker.
// Simplification (documented): one-shot push and pull instead of OmniReduce's streaming window;
// the bytes on the wire are the same. Contiguous ranges make it sensitive to skew.
// Cost: push ≈ nzb·(B·4 + sizeof(Index)), pull ≈ Σ_j nzb_j^agg · (B·4 + sizeof(Index)) where nzb is
// the number of non-zero blocks (block density ≥ element density).
#include "atoll/comm/charged_work.h"
#include "common.h"
#include "omnireduce_blocks.h"
#include "schemes.h"

namespace atl::sync {
namespace {

class OmnireduceScheme final : public SchemeBase<OmnireduceScheme> {
 public:
  explicit OmnireduceScheme(const SchemeOptions& o) : block_(o.omnireduce_block_elements) {}
  std::string_view name() const override { return "omnireduce"; }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    (void)nnz;
    return 4 * M + 4 * (M / static_cast<std::uint64_t>(n) + block_);  // result + owned blocks
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    const auto n = static_cast<std::uint32_t>(comm.size());
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const std::uint64_t M = grad.elements, B = block_;
    const std::uint64_t blocks = (M + B - 1) / B;
    const std::size_t record = sizeof(Index) + B * sizeof(float);  // block id + payload

    // Push: non-zero blocks, grouped by owner (indices are sorted, so blocks come out in order).
    std::vector<std::uint8_t> send;
    std::vector<std::size_t> send_counts(n, 0);
    {
      PhaseScope phase(comm, out.stats, "encode");
      static const auto op = comm::cpu_op_id("omnireduce.encode");
      comm::ChargedWork work(comm, op, static_cast<double>(grad.nnz()));
      std::uint32_t owner = 0;
      for (std::size_t k = 0; k < grad.nnz();) {
        const std::uint64_t b = grad.indices[k] / B;
        while (b >= range_begin(blocks, n, owner + 1)) ++owner;
        const std::size_t at = send.size();
        send.resize(at + record, 0);
        const Index id = static_cast<Index>(b);
        std::memcpy(send.data() + at, &id, sizeof(Index));
        auto* payload = send.data() + at + sizeof(Index);
        for (; k < grad.nnz() && grad.indices[k] / B == b; ++k) {
          std::memcpy(payload + (grad.indices[k] - b * B) * sizeof(float), &grad.values[k],
                      sizeof(float));
        }
        send_counts[owner] += record;
      }
      work.set_size(static_cast<double>(grad.nnz()), static_cast<double>(send.size()));
    }
    std::vector<std::uint8_t> received;
    std::vector<std::size_t> recv_counts;
    {
      PhaseScope phase(comm, out.stats, "push");
      recv_counts = comm.alltoall<std::size_t>(send_counts);
      std::size_t total = 0;
      for (auto c : recv_counts) total += c;
      received.resize(total);
      comm.alltoallv<std::uint8_t>(send, send_counts, received, recv_counts);
      out.stats.push_load_bytes = total - recv_counts[rank];
    }
    std::vector<std::uint8_t> summed;
    {
      PhaseScope phase(comm, out.stats, "aggregate");
      const std::uint64_t first = range_begin(blocks, n, rank);
      const std::uint64_t count = range_begin(blocks, n, rank + 1) - first;
      static const auto op = comm::cpu_op_id("omnireduce.aggregate");
      comm::ChargedWork work(comm, op, static_cast<double>(count * B),
                             static_cast<double>(received.size()));
      std::vector<float> buffer;
      std::vector<std::uint8_t> present;
      omnireduce_aggregate<Index>(received, recv_counts, first, count, B, buffer, present);
      for (std::uint64_t local = 0; local < count; ++local) {
        if (!present[local]) continue;
        const Index id = static_cast<Index>(first + local);
        const std::size_t at = summed.size();
        summed.resize(at + record);
        std::memcpy(summed.data() + at, &id, sizeof(Index));
        std::memcpy(summed.data() + at + sizeof(Index), buffer.data() + local * B,
                    B * sizeof(float));
      }
      out.stats.pull_load_bytes = summed.size() * (n - 1);
    }
    {
      PhaseScope phase(comm, out.stats, "pull");
      std::vector<std::size_t> counts;
      const auto all = comm.allgatherv<std::uint8_t>(summed, &counts);
      static const auto op = comm::cpu_op_id("omnireduce.decode");
      comm::ChargedWork work(comm, op, static_cast<double>(M), static_cast<double>(all.size()));
      out.dense_form = true;
      omnireduce_decode_pull<Index>(all, counts, M, B, out.dense);
    }
  }

 private:
  std::uint64_t block_;
};

}  // namespace

std::unique_ptr<SyncScheme> make_omnireduce(const SchemeOptions& o) {
  if (o.omnireduce_block_elements == 0) {
    throw std::invalid_argument("omnireduce block size must be positive");
  }
  return std::make_unique<OmnireduceScheme>(o);
}

}  // namespace atl::sync
