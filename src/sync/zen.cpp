// Zen (Wang et al., OSDI'25): hash-balanced one-shot push and hash-bitmap pull.
//  1. partition: each local non-zero goes to server zen_owner(idx) (same hash on every rank,
//  applied
//     to 64-index granules: see zen_partition.h);
//  2. push: alltoall of counts, alltoallv of (index, value) entries;
//  3. aggregate: server j sums what it received over its own slots 𝕀_j (≈ M/n, never M);
//  4. pull: server j sends, to every rank (one allgatherv), either a bitmap over 𝕀_j plus the
//     non-zero values (|𝕀_j|/8 + 4·nnz_j bytes) or COO (8·nnz_j bytes), whichever is smaller (per
//     server, per call); receivers decode all blocks into one sorted gradient with the shared
//     layout. Bitmap bytes received per rank total ≈ M/8, independent of n.
// Cost (Eq. 1): T_bp = (n-1)/n · (γ_n + 1) · d·M·8 / b, + 2(n-1)·α for the two exchanges; push and
// pull imbalance ≤ 1 + Θ(sqrt(n log n / nnz)).
#include "zen.h"

#include "atoll/sync/zen_partition.h"
#include "common.h"
#include "schemes.h"

namespace atl::sync {
namespace {

class ZenScheme final : public SchemeBase<ZenScheme> {
 public:
  ZenScheme(const SchemeOptions& o, std::string name, bool pull_bitmap)
      : seed_(o.hash_seed),
        name_(std::move(name)),
        pull_bitmap_(pull_bitmap && o.zen_allow_bitmap) {}
  std::string_view name() const override { return name_; }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    const auto n = static_cast<std::uint32_t>(comm.size());
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const std::uint64_t M = grad.elements;
    if (!layout_.matches(M, n, seed_)) {
      PhaseScope phase(comm, out.stats, "layout");  // once per (M, n): not part of a step
      layout_ = HashLayout(M, n, seed_);
    }

    HashPartition<Index>& part = scratch<Index>();
    {
      PhaseScope phase(comm, out.stats, "partition");
      zen_partition(grad, layout_, part);
    }
    std::vector<Entry<Index>> received;
    {
      PhaseScope phase(comm, out.stats, "push");
      const auto recv_counts = comm.alltoall<std::size_t>(part.counts);
      std::size_t total = 0;
      for (auto c : recv_counts) total += c;
      received.resize(total);
      comm.alltoallv<Entry<Index>>(part.entries, part.counts, received, recv_counts);
      out.stats.push_load_bytes = (total - recv_counts[rank]) * sizeof(Entry<Index>);
    }
    std::vector<std::uint8_t> block;
    {
      PhaseScope phase(comm, out.stats, "aggregate");
      block = zen_encode_pull_block<Index>(layout_, rank, received, pull_bitmap_);
      out.stats.pull_load_bytes = block.size() * (n - 1);
    }
    std::vector<std::size_t> counts;
    std::vector<std::uint8_t> all;
    {
      PhaseScope phase(comm, out.stats, "pull");
      all = comm.allgatherv<std::uint8_t>(block, &counts);
    }
    {
      PhaseScope phase(comm, out.stats, "decode");
      out.dense_form = false;
      zen_decode_pull<Index>(layout_, all, counts, out.sparse);
    }
  }

 private:
  template <class Index>
  HashPartition<Index>& scratch() {
    if constexpr (std::is_same_v<Index, std::uint32_t>)
      return part32_;
    else
      return part64_;
  }

  std::uint64_t seed_;
  std::string name_;
  bool pull_bitmap_;
  HashLayout layout_;
  HashPartition<std::uint32_t> part32_;  // reused between calls
  HashPartition<std::uint64_t> part64_;
};

}  // namespace

std::unique_ptr<SyncScheme> make_zen_variant(const SchemeOptions& options, std::string name,
                                             bool pull_bitmap) {
  return std::make_unique<ZenScheme>(options, std::move(name), pull_bitmap);
}

std::unique_ptr<SyncScheme> make_zen(const SchemeOptions& o) {
  return make_zen_variant(o, "zen", true);
}

}  // namespace atl::sync
