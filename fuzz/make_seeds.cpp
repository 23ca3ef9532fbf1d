// Writes the seed corpora of the sync targets: real messages, made by running the schemes'
// encoders in-process on the Zipf gradients `atoll bench sync` generates, for several (M, n,
// density, index width). Usage: make_seeds CORPUS_ROOT (writes CORPUS_ROOT/<target>/seed-*).
// The file-format targets' seeds come from real runs (fuzz/README.md).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "../src/sync/common.h"
#include "../src/sync/sparcml_message.h"
#include "atoll/sparse/generator.h"
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"
#include "atoll/sync/zen_rows.h"
#include "fuzz_input.h"

namespace {

namespace fs = std::filesystem;
using atl::fuzz::SyncInput;
using namespace atl::sync;
template <class Index>
using Entry = atl::sparse::Entry<Index>;

struct Case {
  std::uint64_t elements;
  std::uint32_t ranks;
  double density;
};

void save(const fs::path& dir, const std::string& name, const SyncInput& in,
          std::span<const std::uint8_t> payload) {
  fs::create_directories(dir);
  const auto bytes = atl::fuzz::write_sync_input(in, payload);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

template <class T>
std::span<const std::uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

template <class Index>
std::vector<atl::sparse::SparseGradient<Index>> gradients(const Case& c) {
  atl::sparse::GeneratorOptions g;
  g.elements = c.elements;
  g.density = c.density;
  std::vector<atl::sparse::SparseGradient<Index>> out;
  for (std::uint32_t r = 0; r < c.ranks; ++r)
    out.push_back(atl::sparse::generate_gradient<Index>(g, static_cast<int>(r)));
  return out;
}

// Every rank's push block to server 0, and server 0's pull block, as Zen sends them.
template <class Index>
void zen_seeds(const fs::path& root, const Case& c, const std::string& tag) {
  const std::uint64_t seed = 7;
  const HashLayout layout(c.elements, c.ranks, seed);
  const auto grads = gradients<Index>(c);
  SyncInput push{c.elements, c.ranks, 0, static_cast<std::uint8_t>(sizeof(Index) == 8), 0, seed};
  std::vector<Entry<Index>> received;
  for (const auto& g : grads) {
    HashPartition<Index> part;
    zen_partition(g, layout, part);
    std::size_t at = 0;  // server 0's block comes first
    push.counts.push_back(part.counts[0]);
    received.insert(received.end(), part.entries.begin(), part.entries.begin() + part.counts[0]);
    (void)at;
  }
  push.flags |= 2;
  save(root / "zen_push", "seed-" + tag, push, as_bytes(received));
  // The pull: every server's block over the whole index space.
  SyncInput pull = push;
  pull.counts.clear();
  std::vector<std::uint8_t> blocks;
  std::pair<std::vector<std::uint8_t>, std::vector<std::size_t>> ef, efc;  // blocks, their sizes
  for (std::uint32_t j = 0; j < c.ranks; ++j) {
    std::vector<Entry<Index>> to_j;
    for (const auto& g : grads) {
      HashPartition<Index> part;
      zen_partition(g, layout, part);
      std::size_t at = 0;
      for (std::uint32_t k = 0; k < j; ++k) at += part.counts[k];
      to_j.insert(to_j.end(), part.entries.begin() + at,
                  part.entries.begin() + at + part.counts[j]);
    }
    const auto block = zen_encode_pull_block<Index>(layout, j, to_j, PullCoding::bitmap_or_coo);
    pull.counts.push_back(block.size());
    blocks.insert(blocks.end(), block.begin(), block.end());
    // zen_ef's blocks (the smallest of four codes) and Elias-Fano of the empty slots forced.
    for (const auto coding : {PullCoding::smallest, PullCoding::elias_fano_complement}) {
      auto& e = coding == PullCoding::smallest ? ef : efc;
      const auto b = zen_encode_pull_block<Index>(layout, j, to_j, coding);
      e.second.push_back(b.size());
      e.first.insert(e.first.end(), b.begin(), b.end());
    }
  }
  pull.flags = static_cast<std::uint8_t>(sizeof(Index) == 8);
  save(root / "zen_pull", "seed-" + tag, pull, blocks);
  for (const auto& [name, e] : {std::pair{"seed-ef-", &ef}, std::pair{"seed-efc-", &efc}}) {
    SyncInput in = pull;
    in.counts = e->second;
    save(root / "zen_pull", name + tag, in, e->first);
  }
}

// Zen over rows (width 1 + extra % 8 = 4): every rank's push to server 0 and every server's pull
// block, from the same gradients' indices taken as row ids (R = M rows).
template <class Index>
void zen_row_seeds(const fs::path& root, const Case& c, const std::string& tag) {
  const std::uint64_t seed = 7;
  const std::uint32_t w = 4;
  const RowLayout layout(c.elements, c.ranks, seed);
  std::vector<RowPartition<Index>> parts(c.ranks);
  for (std::uint32_t r = 0; r < c.ranks; ++r) {
    auto g = gradients<Index>(c)[r];
    g.elements *= w;
    g.width = w;
    std::vector<float> values;
    for (const float v : g.values) values.insert(values.end(), w, v);
    g.values = values;
    zen_row_partition(g, layout, parts[r]);
  }
  auto received_by = [&](std::uint32_t j, std::vector<std::size_t>& counts) {
    std::vector<std::uint8_t> bytes;
    for (const auto& part : parts) {
      std::size_t at = 0;
      for (std::uint32_t k = 0; k < j; ++k) at += part.counts[k];
      bytes.insert(bytes.end(), part.bytes.begin() + at, part.bytes.begin() + at + part.counts[j]);
      counts.push_back(part.counts[j]);
    }
    return bytes;
  };
  SyncInput push{c.elements, c.ranks, 0, static_cast<std::uint8_t>(sizeof(Index) == 8),
                 w - 1,      seed};
  push.flags |= 1 << 2;  // bitmap or ids
  const auto to_0 = received_by(0, push.counts);
  save(root / "zen_rows", "seed-push-" + tag, push, to_0);
  SyncInput pull = push;
  pull.flags |= 2;
  pull.counts.clear();
  std::vector<std::uint8_t> blocks, efc_blocks;
  for (std::uint32_t j = 0; j < c.ranks; ++j) {
    std::vector<std::size_t> counts;
    const auto to_j = received_by(j, counts);
    ZenRowSums sums;
    zen_row_aggregate<Index>(layout, j, w, to_j, counts, sums);
    zen_row_encode<Index>(layout, j, sums, PullCoding::bitmap_or_coo, blocks);
    zen_row_encode<Index>(layout, j, sums, PullCoding::elias_fano_complement, efc_blocks);
    pull.counts.push_back(sums.rows);
  }
  save(root / "zen_rows", "seed-pull-" + tag, pull, blocks);
  // Elias-Fano of the empty slots: coding (flags >> 2) % kPullCodings = 9 % 5 = 4, bit 4 clear.
  SyncInput efc = pull;
  efc.flags = static_cast<std::uint8_t>((pull.flags & 3) | (9 << 2));
  save(root / "zen_rows", "seed-pull-efc-" + tag, efc, efc_blocks);
}

template <class Index>
void sparcml_seeds(const fs::path& root, const Case& c, const std::string& tag) {
  const auto grads = gradients<Index>(c);
  SparcmlAccumulator<Index> a{false, grads[0].indices, grads[0].values};
  SyncInput in{c.elements, c.ranks, 0, static_cast<std::uint8_t>(sizeof(Index) == 8), 1, 3};
  save(root / "sparcml", "seed-sparse-" + tag, in, sparcml_encode(a));
  a.idx.clear();
  a.val.assign(c.elements, 0.5f);
  a.dense = true;
  in.flags |= 2;
  save(root / "sparcml", "seed-dense-" + tag, in, sparcml_encode(a));
}

// OmniReduce's records as rank 1 pushes them to aggregator 0 and as the pull delivers them.
template <class Index>
void omnireduce_seeds(const fs::path& root, const Case& c, const std::string& tag) {
  const std::uint64_t B = 16;
  const auto grads = gradients<Index>(c);
  const std::uint64_t blocks = (c.elements + B - 1) / B;
  SyncInput in{c.elements, c.ranks, 0, static_cast<std::uint8_t>(sizeof(Index) == 8), B - 1, 0};
  std::vector<std::uint8_t> push, pull;
  in.counts.assign(c.ranks, 0);
  std::vector<std::size_t> pull_counts(c.ranks, 0);
  const auto& g = grads[0];
  for (std::size_t k = 0; k < g.nnz();) {
    const std::uint64_t b = g.indices[k] / B;
    std::vector<std::uint8_t> record(sizeof(Index) + B * 4, 0);
    const Index id = static_cast<Index>(b);
    std::memcpy(record.data(), &id, sizeof(Index));
    for (; k < g.nnz() && g.indices[k] / B == b; ++k)
      std::memcpy(record.data() + sizeof(Index) + (g.indices[k] - b * B) * 4, &g.values[k], 4);
    std::uint32_t owner = 0;
    while (b >= range_begin(blocks, c.ranks, owner + 1)) ++owner;
    pull_counts[owner] += record.size();
    pull.insert(pull.end(), record.begin(), record.end());
    if (owner == 0) {
      in.counts[0] += record.size();
      push.insert(push.end(), record.begin(), record.end());
    }
  }
  save(root / "omnireduce", "seed-push-" + tag, in, push);
  in.counts = pull_counts;
  in.flags |= 2;
  save(root / "omnireduce", "seed-pull-" + tag, in, pull);
}

// The sparse PS's push to server 0, its pull, and AGsparse's allgather.
template <class Index>
void sparse_ps_seeds(const fs::path& root, const Case& c, const std::string& tag) {
  const auto grads = gradients<Index>(c);
  const std::uint64_t M = c.elements;
  SyncInput in{M, c.ranks, 0, static_cast<std::uint8_t>(sizeof(Index) == 8), 0, 0};
  std::vector<Entry<Index>> push, all;
  for (const auto& g : grads) {
    std::size_t count = 0;
    for (std::size_t k = 0; k < g.nnz() && g.indices[k] < range_begin(M, c.ranks, 1); ++k, ++count)
      push.push_back({g.indices[k], g.values[k]});
    in.counts.push_back(count);
  }
  save(root / "sparse_ps", "seed-push-" + tag, in, as_bytes(push));
  // Pull: each server's range of the first gradient (already summed form: sorted, in range).
  in.counts.assign(c.ranks, 0);
  std::uint32_t owner = 0;
  for (std::size_t k = 0; k < grads[0].nnz(); ++k) {
    while (grads[0].indices[k] >= range_begin(M, c.ranks, owner + 1)) ++owner;
    ++in.counts[owner];
    all.push_back({grads[0].indices[k], grads[0].values[k]});
  }
  in.flags |= 2;
  save(root / "sparse_ps", "seed-pull-" + tag, in, as_bytes(all));
  all.clear();
  in.counts.clear();
  for (const auto& g : grads) {
    for (std::size_t k = 0; k < g.nnz(); ++k) all.push_back({g.indices[k], g.values[k]});
    in.counts.push_back(g.nnz());
  }
  in.flags = static_cast<std::uint8_t>((sizeof(Index) == 8) | 4);
  save(root / "sparse_ps", "seed-agsparse-" + tag, in, as_bytes(all));
}

template <class Index>
void all_seeds(const fs::path& root, const Case& c) {
  const std::string tag =
      fmt::format("M{}-n{}-d{}-i{}", c.elements, c.ranks, c.density, 8 * sizeof(Index));
  zen_seeds<Index>(root, c, tag);
  zen_row_seeds<Index>(root, c, tag);
  sparcml_seeds<Index>(root, c, tag);
  omnireduce_seeds<Index>(root, c, tag);
  sparse_ps_seeds<Index>(root, c, tag);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds CORPUS_ROOT\n";
    return 2;
  }
  const fs::path root = argv[1];
  for (const Case& c : {Case{1000, 2, 0.05}, Case{4096, 4, 0.01}, Case{20000, 3, 0.02},
                        Case{65536, 8, 0.001}, Case{100, 1, 0.3}}) {
    all_seeds<std::uint32_t>(root, c);
    all_seeds<std::uint64_t>(root, c);
  }
  return 0;
}
