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

#include <bit>

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
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
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
      block = aggregate_and_encode(layout, rank, received);
      out.stats.pull_load_bytes = block.size() * (n - 1);
    }
    {
      PhaseScope phase(comm, out.stats, "pull");
      std::vector<std::size_t> counts;
      const auto all = comm.allgatherv<std::uint8_t>(block, &counts);
      out.dense_form = false;
      decode_sorted(layout, all, counts, out.sparse);
    }
  }

 private:
  // Server side: sum the received entries over this server's slots and encode the non-zero sums
  // as a bitmap or COO block: [u8 format][u64 nnz][bitmap or indices][values].
  template <class Index>
  std::vector<std::uint8_t> aggregate_and_encode(const HashLayout<Index>& layout,
                                                 std::uint32_t rank,
                                                 std::vector<Entry<Index>>& received) const {
    const auto members = layout.members(rank);
    const std::size_t bitmap_bytes = (members.size() + 7) / 8;
    ByteWriter w;
    if (received.size() * 16 >= members.size()) {
      // Compact buffer over 𝕀_rank (|𝕀_j| ≈ M/n floats).
      std::vector<float> slots(members.size(), 0.0f);
      for (const auto& e : received) slots[layout.slot(e.index)] += e.value;
      std::size_t nnz = 0;
      for (float v : slots) nnz += v != 0.0f;
      if (pull_bitmap_ && bitmap_bytes < nnz * sizeof(Index)) {
        const auto enc = bitmap_encode(slots);
        w.write(kBitmap);
        w.write<std::uint64_t>(enc.values.size());
        w.append(enc.bitmap.data(), enc.bitmap.size());
        w.append(enc.values.data(), enc.values.size() * sizeof(float));
        return std::move(w.bytes);
      }
      std::vector<Index> idx(nnz);
      std::vector<float> val(nnz);
      for (std::size_t s = 0, k = 0; s < slots.size(); ++s) {
        if (slots[s] != 0.0f) {
          idx[k] = members[s];
          val[k++] = slots[s];
        }
      }
      w.write(kCoo);
      w.write<std::uint64_t>(nnz);
      w.append(idx.data(), nnz * sizeof(Index));
      w.append(val.data(), nnz * sizeof(float));
      return std::move(w.bytes);
    }
    // Few entries for many slots: sort instead of scanning the slots.
    std::vector<Index> idx;
    std::vector<float> val;
    aggregate_owned<Index>(
        received, members.size(), [&](Index x) { return layout.slot(x); },
        [&](std::size_t s) { return members[s]; }, idx, val);
    w.write(kCoo);
    w.write<std::uint64_t>(idx.size());
    w.append(idx.data(), idx.size() * sizeof(Index));
    w.append(val.data(), val.size() * sizeof(float));
    return std::move(w.bytes);
  }

  // Receiver side: decode every server's block into one gradient sorted by index. Indices are
  // unique across blocks (each has one owner), so the sorted position of x is its rank among all
  // decoded indices: pass 1 marks them in a presence bitmap over [0, M), pass 2 places each entry
  // at prefix_popcount(x). O(nnz + M/64), no comparison sort, no per-element allocation.
  template <class Index>
  static void decode_sorted(const HashLayout<Index>& layout, const std::vector<std::uint8_t>& all,
                            const std::vector<std::size_t>& counts, SparseGradient<Index>& res) {
    const auto n = static_cast<std::uint32_t>(counts.size());
    struct View {
      std::uint8_t format;
      std::uint64_t nnz;
      const std::uint8_t* keys;  // bitmap or indices
      const std::uint8_t* values;
    };
    std::vector<View> views(n);
    std::uint64_t total = 0;
    std::size_t at = 0;
    for (std::uint32_t j = 0; j < n; ++j) {
      ByteReader r(std::span<const std::uint8_t>(all).subspan(at, counts[j]));
      View v{};
      v.format = r.read<std::uint8_t>();
      v.nnz = r.read<std::uint64_t>();
      const std::size_t key_bytes = v.format == kBitmap ? (layout.member_count(j) + 7) / 8
                                                        : v.nnz * sizeof(Index);
      if (r.remaining() != key_bytes + v.nnz * sizeof(float)) {
        throw std::runtime_error("zen: malformed pull block from server " + std::to_string(j));
      }
      v.keys = all.data() + at + 9;
      v.values = v.keys + key_bytes;
      views[j] = v;
      total += v.nnz;
      at += counts[j];
    }
    const std::uint64_t M = layout.elements();
    // Visits (index, value position) of block j in order.
    auto for_each = [&](std::uint32_t j, auto&& visit) {
      const View& v = views[j];
      if (v.format == kBitmap) {
        const auto members = layout.members(j);
        const std::size_t bytes = (members.size() + 7) / 8;
        std::uint64_t k = 0;
        for (std::size_t base = 0; base < members.size(); base += 64) {
          std::uint64_t word = 0;
          std::memcpy(&word, v.keys + base / 8, std::min<std::size_t>(8, bytes - base / 8));
          while (word) {
            const std::size_t p = base + static_cast<std::size_t>(std::countr_zero(word));
            word &= word - 1;
            if (p >= members.size() || k >= v.nnz) {
              throw std::runtime_error("zen: pull bitmap from server " + std::to_string(j) +
                                       " does not match its value count");
            }
            visit(members[p], k++);
          }
        }
        if (k != v.nnz) {
          throw std::runtime_error("zen: pull bitmap from server " + std::to_string(j) +
                                   " does not match its value count");
        }
      } else {
        for (std::uint64_t k = 0; k < v.nnz; ++k) {
          Index x;
          std::memcpy(&x, v.keys + k * sizeof(Index), sizeof(Index));
          if (x >= M) throw std::runtime_error("zen: pulled index out of range");
          visit(x, k);
        }
      }
    };
    const std::size_t words = (M + 63) / 64;
    std::vector<std::uint64_t> present(words, 0);
    for (std::uint32_t j = 0; j < n; ++j) {
      for_each(j, [&](Index x, std::uint64_t) { present[x >> 6] |= std::uint64_t{1} << (x & 63); });
    }
    std::vector<std::uint64_t> prefix(words);
    std::uint64_t running = 0;
    for (std::size_t w = 0; w < words; ++w) {
      prefix[w] = running;
      running += static_cast<std::uint64_t>(std::popcount(present[w]));
    }
    if (running != total) throw std::runtime_error("zen: two servers sent the same index");
    res.elements = M;
    res.indices.resize(total);
    res.values.resize(total);
    for (std::uint32_t j = 0; j < n; ++j) {
      const auto* values = views[j].values;
      for_each(j, [&](Index x, std::uint64_t k) {
        const std::uint64_t below = (std::uint64_t{1} << (x & 63)) - 1;
        const std::uint64_t pos = prefix[x >> 6] + std::popcount(present[x >> 6] & below);
        res.indices[pos] = x;
        std::memcpy(&res.values[pos], values + k * sizeof(float), sizeof(float));
      });
    }
  }

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
