// OmniReduce (Fei et al., SIGCOMM'21), block-sparse: the tensor is cut into blocks of B elements
// (default 256); only blocks holding a non-zero travel, each tagged with its block id, no
// per-element indices. Aggregator r (co-located with worker r) owns a contiguous range of blocks,
// sums what it receives and sends the summed non-zero blocks back to every worker.
// Simplification (documented): one-shot push and pull instead of OmniReduce's streaming window;
// the bytes on the wire are the same. Contiguous ranges make it sensitive to skew.
// Cost: push ≈ nzb·(B·4 + sizeof(Index)), pull ≈ Σ_j nzb_j^agg · (B·4 + sizeof(Index)) where nzb is
// the number of non-zero blocks (block density ≥ element density).
#include "common.h"
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
    }
    std::vector<std::uint8_t> received;
    {
      PhaseScope phase(comm, out.stats, "push");
      const auto recv_counts = comm.alltoall<std::size_t>(send_counts);
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
      std::vector<float> buffer(count * B, 0.0f);
      std::vector<std::uint8_t> present(count, 0);
      for (std::size_t at = 0; at < received.size(); at += record) {
        Index id;
        std::memcpy(&id, received.data() + at, sizeof(Index));
        if (id < first || id - first >= count) {
          throw std::runtime_error("omnireduce: block " + std::to_string(id) +
                                   " sent to the wrong aggregator");
        }
        const std::uint64_t local = id - first;
        present[local] = 1;
        float* dst = buffer.data() + local * B;
        const auto* src = received.data() + at + sizeof(Index);
        for (std::uint64_t e = 0; e < B; ++e) {
          float v;
          std::memcpy(&v, src + e * sizeof(float), sizeof(float));
          dst[e] += v;
        }
      }
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
      const auto all = comm.allgatherv<std::uint8_t>(summed, nullptr);
      out.dense_form = true;
      out.dense.assign(M, 0.0f);
      for (std::size_t at = 0; at < all.size(); at += record) {
        Index id;
        std::memcpy(&id, all.data() + at, sizeof(Index));
        const std::uint64_t begin = static_cast<std::uint64_t>(id) * B;
        const std::uint64_t len = std::min<std::uint64_t>(B, M - begin);
        std::memcpy(out.dense.data() + begin, all.data() + at + sizeof(Index), len * sizeof(float));
      }
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
