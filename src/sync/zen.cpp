// Zen (Wang et al., OSDI'25): hash-balanced one-shot push and hash-bitmap pull.
//  1. partition: each local non-zero goes to server zen_owner(idx) (same hash on every rank);
//  2. push: alltoall of counts, alltoallv of (index, value) entries;
//  3. aggregate: server j sums what it received over its own slots 𝕀_j (≈ M/n, never M);
//  4. pull: server j sends, to every rank, either a bitmap over 𝕀_j plus the non-zero values
//     (ceil(|𝕀_j|/8) + 4·nnz_j bytes) or COO (8·nnz_j bytes), whichever is smaller (per server, per
//     call); receivers decode bitmaps with the shared layout. Bitmap bytes received per rank total
//     ≈ M/8, independent of n.
// Cost (Eq. 1): T_bp = (n-1)/n · (γ_n + 1) · d·M·8 / b, + 2(n-1)·α for the two exchanges; push and
// pull imbalance ≤ 1 + Θ(sqrt(n log n / nnz)).
#include "zen.h"

#include "atoll/sync/zen_partition.h"
#include "common.h"
#include "schemes.h"

namespace atl::sync {
namespace {

constexpr std::uint8_t kCoo = 0, kBitmap = 1;

class ZenScheme final : public SchemeBase<ZenScheme> {
 public:
  ZenScheme(const SchemeOptions& o, std::string name, bool pull_bitmap)
      : seed_(o.hash_seed), name_(std::move(name)), pull_bitmap_(pull_bitmap && o.zen_allow_bitmap) {}
  std::string_view name() const override { return name_; }

  template <class Index>
  SyncResult<Index> run(Communicator& comm, const SparseGradient<Index>& grad) {
    SyncResult<Index> out;
    const auto n = static_cast<std::uint32_t>(comm.size());
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const std::uint64_t M = grad.elements;
    HashLayout<Index>& layout = layout_for<Index>();
    if (!layout.matches(M, n, seed_)) {
      PhaseScope phase(comm, out.stats, "layout");  // once per (M, n): not part of a step
      layout = HashLayout<Index>(M, n, seed_);
    }

    HashPartition<Index> part;
    {
      PhaseScope phase(comm, out.stats, "partition");
      part = zen_partition(grad, n, seed_);
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
      const auto members = layout.members(rank);
      std::vector<Index> idx;
      std::vector<float> val;
      aggregate_owned<Index>(
          received, members.size(), [&](Index x) { return layout.slot(x); },
          [&](std::size_t s) { return members[s]; }, idx, val);
      const std::size_t bitmap_bytes = (members.size() + 7) / 8;
      const bool bitmap = pull_bitmap_ && bitmap_bytes < idx.size() * sizeof(Index);
      ByteWriter w;
      w.write(bitmap ? kBitmap : kCoo);
      w.write<std::uint64_t>(idx.size());
      if (bitmap) {
        std::vector<std::uint8_t> bits(bitmap_bytes, 0);
        for (auto x : idx) {
          const auto s = layout.slot(x);
          bits[s >> 3] |= static_cast<std::uint8_t>(1u << (s & 7));
        }
        w.append(bits.data(), bits.size());
      } else {
        w.append(idx.data(), idx.size() * sizeof(Index));
      }
      w.append(val.data(), val.size() * sizeof(float));
      block = std::move(w.bytes);
      out.stats.pull_load_bytes = block.size() * (n - 1);
    }
    {
      PhaseScope phase(comm, out.stats, "pull");
      std::vector<std::size_t> counts;
      const auto all = comm.allgatherv<std::uint8_t>(block, &counts);
      auto& res = out.sparse;
      res.elements = M;
      std::size_t at = 0;
      for (std::uint32_t j = 0; j < n; ++j) {
        ByteReader r(std::span<const std::uint8_t>(all).subspan(at, counts[j]));
        at += counts[j];
        const auto format = r.read<std::uint8_t>();
        const auto nnz = r.read<std::uint64_t>();
        if (format == kBitmap) {
          const auto members = layout.members(j);
          std::vector<std::uint8_t> bits((members.size() + 7) / 8);
          r.take(bits.data(), bits.size());
          std::vector<float> vals(nnz);
          r.take(vals.data(), nnz * sizeof(float));
          bitmap_decode<Index>(bits, vals, members, res.indices, res.values);
        } else {
          const std::size_t base = res.indices.size();
          res.indices.resize(base + nnz);
          res.values.resize(base + nnz);
          r.take(res.indices.data() + base, nnz * sizeof(Index));
          r.take(res.values.data() + base, nnz * sizeof(float));
        }
      }
      // Each server's run is sorted; interleave them into one sorted gradient.
      sort_unique_by_index(M, res.indices, res.values);
    }
    return out;
  }

 private:
  template <class Index>
  HashLayout<Index>& layout_for() {
    if constexpr (std::is_same_v<Index, std::uint32_t>) return layout32_;
    else return layout64_;
  }

  std::uint64_t seed_;
  std::string name_;
  bool pull_bitmap_;
  HashLayout<std::uint32_t> layout32_;
  HashLayout<std::uint64_t> layout64_;
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
