// SparCML's sparse allreduce (Renggli et al., SC'19), SSAR recursive doubling:
// log2(p) rounds; in round i, swap the accumulated gradient with rank XOR 2^i and merge-sum. Once
// the sparse form would exceed `sparcml_dense_switch` · 4M bytes the accumulator turns dense
// (δ in the paper). World sizes that are not a power of two fold the extra ranks r >= p onto r - p
// first and send them the result at the end.
// Cost (Eq. 2 of Zen): T = Σ_{i=1..log n} γ_{2^{i-1}} · d·M·(sizeof(Index)+4) / b, + log2(n)·α.
#include <bit>

#include "common.h"
#include "schemes.h"

namespace atl::sync {
namespace {

template <class Index>
struct Accumulator {
  bool dense = false;
  std::vector<Index> idx;
  std::vector<float> val;  // sparse values, or M dense floats
};

constexpr std::uint8_t kSparse = 0, kDense = 1;

template <class Index>
std::vector<std::uint8_t> encode(const Accumulator<Index>& a) {
  ByteWriter w;
  w.write(a.dense ? kDense : kSparse);
  w.write<std::uint64_t>(a.val.size());
  if (!a.dense) w.append(a.idx.data(), a.idx.size() * sizeof(Index));
  w.append(a.val.data(), a.val.size() * sizeof(float));
  return std::move(w.bytes);
}

template <class Index>
Accumulator<Index> decode(std::span<const std::uint8_t> bytes) {
  ByteReader r(bytes);
  Accumulator<Index> a;
  a.dense = r.read<std::uint8_t>() == kDense;
  const auto count = r.read<std::uint64_t>();
  if (!a.dense) {
    a.idx.resize(count);
    r.take(a.idx.data(), count * sizeof(Index));
  }
  a.val.resize(count);
  r.take(a.val.data(), count * sizeof(float));
  return a;
}

template <class Index>
void to_dense(Accumulator<Index>& a, std::uint64_t elements) {
  if (a.dense) return;
  std::vector<float> d(elements, 0.0f);
  for (std::size_t k = 0; k < a.idx.size(); ++k) d[a.idx[k]] = a.val[k];
  a.val.swap(d);
  a.idx.clear();
  a.dense = true;
}

// mine += other. Both partners of a round compute the same sum (float addition commutes) and take
// the same dense/sparse decision, so they stay identical.
template <class Index>
void accumulate(Accumulator<Index>& mine, Accumulator<Index>&& other, std::uint64_t elements,
                double dense_switch) {
  if (mine.dense || other.dense) {
    to_dense(mine, elements);
    if (other.dense) {
      for (std::size_t k = 0; k < elements; ++k) mine.val[k] += other.val[k];
    } else {
      for (std::size_t k = 0; k < other.idx.size(); ++k) mine.val[other.idx[k]] += other.val[k];
    }
    return;
  }
  std::vector<Index> idx;
  std::vector<float> val;
  sparse::merge_add<Index>(mine.idx, mine.val, other.idx, other.val, idx, val);
  mine.idx.swap(idx);
  mine.val.swap(val);
  if (static_cast<double>(mine.idx.size()) * (sizeof(Index) + 4) >
      dense_switch * 4.0 * static_cast<double>(elements)) {
    to_dense(mine, elements);
  }
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
        const auto bytes = encode(acc);
        const std::uint64_t size = bytes.size();
        comm.send<std::uint64_t>(std::span(&size, 1), rank - p);
        comm.send<std::uint8_t>(bytes, rank - p);
      }
      PhaseScope phase(comm, out.stats, "unfold");
      std::uint64_t size = 0;
      comm.recv<std::uint64_t>(std::span(&size, 1), rank - p);
      std::vector<std::uint8_t> bytes(size);
      comm.recv<std::uint8_t>(bytes, rank - p);
      acc = decode<Index>(bytes);
    } else {
      if (rank + p < n) {
        PhaseScope phase(comm, out.stats, "fold");
        std::uint64_t size = 0;
        comm.recv<std::uint64_t>(std::span(&size, 1), rank + p);
        std::vector<std::uint8_t> bytes(size);
        comm.recv<std::uint8_t>(bytes, rank + p);
        accumulate(acc, decode<Index>(bytes), M, dense_switch_);
      }
      {
        PhaseScope phase(comm, out.stats, "recursive_doubling");
        for (int mask = 1; mask < p; mask <<= 1) {
          const int partner = rank ^ mask;
          const auto mine = encode(acc);
          const auto theirs = comm.sendrecv_sized<std::uint8_t>(mine, partner, partner);
          accumulate(acc, decode<Index>(theirs), M, dense_switch_);
        }
      }
      if (rank + p < n) {
        PhaseScope phase(comm, out.stats, "unfold");
        const auto bytes = encode(acc);
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
