// CPU cost of Zen's data path in non-zeros per second, beside a memcpy of the same bytes measured
// in the same run: partition (push side), server aggregation + pull-block encoding, bitmap
// encoding alone, and a receiver's decode of all n pull blocks into one sorted gradient (warm, and
// cold as under SMPI).
// Workload: bench sync's defaults (M = 2^24, density 1%, Zipf 1.1) with n = 16 workers/servers.
// Prints Google Benchmark's table, then each step's byte throughput as a share of memcpy's.
#include <benchmark/benchmark.h>

#include <cstring>
#include <iostream>
#include <map>

#include "../src/sync/common.h"
#include "../src/sync/zen_fold.h"
#include "atoll/sparse/generator.h"
#include "atoll/sync/entry_fold.h"
#include "atoll/sync/zen_partition.h"
#include "atoll/util/allocator.h"

namespace {

using namespace atl;
using Index = std::uint32_t;
constexpr std::uint32_t kServers = 16;
constexpr std::uint64_t kSeed = 7;

struct Workload {
  std::vector<sparse::SparseGradient<Index>> workers;
  sync::HashLayout layout;
  std::vector<std::vector<sparse::Entry<Index>>> received;  // per server, after the push
  std::vector<std::vector<std::size_t>> received_counts;    // per server, from each worker
  std::vector<std::uint8_t> blocks;                         // all pull blocks, concatenated
  std::vector<std::size_t> block_bytes;
  std::vector<float> server0_slots;

  explicit Workload(double density) {
    sparse::GeneratorOptions g;
    g.elements = std::uint64_t{1} << 24;
    g.density = density;
    for (std::uint32_t r = 0; r < kServers; ++r)
      workers.push_back(sparse::generate_gradient<Index>(g, static_cast<int>(r)));
    layout = sync::HashLayout(g.elements, kServers, kSeed);
    received.resize(kServers);
    received_counts.resize(kServers);
    for (const auto& w : workers) {
      sync::HashPartition<Index> part;
      sync::zen_partition(w, layout, part);
      std::size_t at = 0;
      for (std::uint32_t j = 0; j < kServers; ++j) {
        received[j].insert(received[j].end(), part.entries.begin() + at,
                           part.entries.begin() + at + part.counts[j]);
        received_counts[j].push_back(part.counts[j]);
        at += part.counts[j];
      }
    }
    server0_slots.assign(layout.slot_count(0), 0.0f);
    for (const auto& e : received[0]) server0_slots[layout.slot(e.index)] += e.value;
    for (std::uint32_t j = 0; j < kServers; ++j) {
      auto copy = received[j];
      const auto b =
          sync::zen_encode_pull_block<Index>(layout, j, copy, sync::PullCoding::bitmap_or_coo);
      blocks.insert(blocks.end(), b.begin(), b.end());
      block_bytes.push_back(b.size());
    }
  }
};

const Workload& workload() {
  static const Workload w(0.01);  // built once per process; benchmarks only read it
  return w;
}

// At 0.1%: a server receives fewer entries than a sixteenth of its slots, and sums them without
// its slot buffer (ZenServerSums::sparse).
const Workload& sparse_workload() {
  static const Workload w(0.001);
  return w;
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// Bytes of a gradient in COO form: the partition reads and writes this much.
void BM_ZenPartition(benchmark::State& state) {
  const auto& g = workload().workers[0];
  sync::HashPartition<Index> part;  // reused across steps, as the Zen scheme does
  for (auto _ : state) {
    sync::zen_partition(g, workload().layout, part);
    benchmark::DoNotOptimize(part.entries.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * g.nnz()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * g.nnz() * 8));
}

// The same as under SMPI, where 16 ranks partition one after another in one process: 16 workers'
// gradients, layouts and partitions used in turn, so that their lines come from memory (or the
// last-level cache).
void BM_ZenPartitionCold(benchmark::State& state) {
  const auto& w = workload();
  constexpr std::size_t kCopies = 16;
  const std::vector<sync::HashLayout> layouts(kCopies, w.layout);
  std::vector<sync::HashPartition<Index>> parts(kCopies);
  std::size_t k = 0, nnz = 0;
  for (auto _ : state) {
    const auto& g = w.workers[k];
    sync::zen_partition(g, layouts[k], parts[k]);
    benchmark::DoNotOptimize(parts[k].entries.data());
    nnz += g.nnz();
    k = (k + 1) % kCopies;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(nnz));
  state.SetBytesProcessed(static_cast<std::int64_t>(nnz * 8));
}

// Server 0's aggregation and its whole pull block's encode. Argument 1: with the senders' counts,
// as the Zen scheme calls it (the slots range by range of cache size); 0: without (one pass over
// the entries into the whole buffer).
void aggregate_encode(benchmark::State& state, const Workload& w) {
  const auto counts = state.range(0) != 0 ? std::span<const std::size_t>(w.received_counts[0])
                                          : std::span<const std::size_t>{};
  const auto buckets = sync::zen_granule_bounds(w.layout.elements(), 1);
  std::vector<sparse::Entry<Index>> copy;
  sync::ZenServerSums<Index> sums;  // reused across steps, as the Zen scheme does
  std::vector<std::uint8_t> block;
  for (auto _ : state) {
    state.PauseTiming();
    copy = w.received[0];
    state.ResumeTiming();
    sync::zen_aggregate<Index>(w.layout, 0, copy, buckets, sums, counts);
    block.clear();
    sync::zen_encode_pull_chunk<Index>(w.layout, 0, sums, 0, w.layout.slot_count(0),
                                       sync::PullCoding::bitmap_or_coo, block);
    benchmark::DoNotOptimize(block.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * w.received[0].size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.received[0].size() * 8));
}

void BM_ZenAggregateEncode(benchmark::State& state) { aggregate_encode(state, workload()); }
void BM_ZenAggregateEncodeSparse(benchmark::State& state) {
  aggregate_encode(state, sparse_workload());
}

// The same as under SMPI, where 16 ranks aggregate one after another in one process, each with
// its own hash layout (3.5 MB of tables at M = 2^24), entries and sums: 16 copies of each, used
// in turn, so that their lines come from memory (or the last-level cache).
void aggregate_encode_cold(benchmark::State& state, const Workload& w) {
  constexpr std::size_t kCopies = 16;
  const std::vector<sync::HashLayout> layouts(kCopies, w.layout);
  const auto buckets = sync::zen_granule_bounds(w.layout.elements(), 1);
  std::vector<std::vector<sparse::Entry<Index>>> copies(kCopies);
  std::vector<sync::ZenServerSums<Index>> sums(kCopies);
  std::vector<std::uint8_t> block;
  std::size_t k = 0;
  for (auto _ : state) {
    state.PauseTiming();
    copies[k] = w.received[0];
    state.ResumeTiming();
    sync::zen_aggregate<Index>(layouts[k], 0, copies[k], buckets, sums[k], w.received_counts[0]);
    block.clear();
    sync::zen_encode_pull_chunk<Index>(layouts[k], 0, sums[k], 0, w.layout.slot_count(0),
                                       sync::PullCoding::bitmap_or_coo, block);
    benchmark::DoNotOptimize(block.data());
    k = (k + 1) % kCopies;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * w.received[0].size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.received[0].size() * 8));
}

void BM_ZenAggregateEncodeCold(benchmark::State& state) { aggregate_encode_cold(state, workload()); }
void BM_ZenAggregateEncodeSparseCold(benchmark::State& state) {
  aggregate_encode_cold(state, sparse_workload());
}

void BM_BitmapEncode(benchmark::State& state) {
  const auto& w = workload();
  std::size_t nnz = 0;
  for (auto _ : state) {
    auto block = sync::bitmap_encode(w.server0_slots);
    nnz = block.values.size();
    benchmark::DoNotOptimize(block.bitmap.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * nnz));
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * (w.server0_slots.size() / 8 + 4 * nnz)));
}

// One receiver's whole pull decode: every server's block into one sorted gradient.
void BM_ZenPullDecode(benchmark::State& state) {
  const auto& w = workload();
  sparse::SparseGradient<Index> out;
  for (auto _ : state) {
    sync::zen_decode_pull<Index>(w.layout, w.blocks, w.block_bytes, out);
    benchmark::DoNotOptimize(out.indices.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * out.nnz()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.blocks.size()));
}

// The same decode as under SMPI, where 16 ranks decode one after another in one process: each
// call reads another copy of the blocks and writes another result (16 of each, 300 MB in all), so
// both come from memory, not from the caches the warm benchmark above runs in.
void BM_ZenPullDecodeCold(benchmark::State& state) {
  const auto& w = workload();
  constexpr std::size_t kCopies = 16;
  static const std::vector<std::vector<std::uint8_t>> copies(kCopies, w.blocks);
  static std::vector<sparse::SparseGradient<Index>> outs(kCopies);
  std::size_t k = 0;
  for (auto _ : state) {
    sync::zen_decode_pull<Index>(w.layout, copies[k], w.block_bytes, outs[k]);
    benchmark::DoNotOptimize(outs[k].indices.data());
    k = (k + 1) % kCopies;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * outs[0].nnz()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.blocks.size()));
}

// A consumer's read of the same blocks where they arrived (bench sync --consume): every server's
// block folded in place (zen_fold.h), no sorted result written; warm, then cold as above.
void BM_ZenPullFold(benchmark::State& state) {
  const auto& w = workload();
  const auto granules = (w.layout.elements() + sync::kZenGranule - 1) / sync::kZenGranule;
  sync::EntryFold f;
  for (auto _ : state) {
    f = sync::zen_fold_pull_chunk<Index>(w.layout, 0, granules, w.blocks, w.block_bytes);
    benchmark::DoNotOptimize(f.sum);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * f.count));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.blocks.size()));
}

void BM_ZenPullFoldCold(benchmark::State& state) {
  const auto& w = workload();
  const auto granules = (w.layout.elements() + sync::kZenGranule - 1) / sync::kZenGranule;
  constexpr std::size_t kCopies = 16;
  static const std::vector<std::vector<std::uint8_t>> copies(kCopies, w.blocks);
  sync::EntryFold f;
  std::size_t k = 0;
  for (auto _ : state) {
    f = sync::zen_fold_pull_chunk<Index>(w.layout, 0, granules, copies[k], w.block_bytes);
    benchmark::DoNotOptimize(f.sum);
    k = (k + 1) % kCopies;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * f.count));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.blocks.size()));
}

// The consumer's read of the decoded result instead (a sorted COO array), cold: the decode's
// result for 16 receivers in turn, each folded (entry_fold.h).
void BM_SortedFoldCold(benchmark::State& state) {
  const auto& w = workload();
  constexpr std::size_t kCopies = 16;
  static std::vector<sparse::SparseGradient<Index>> outs = [&] {
    std::vector<sparse::SparseGradient<Index>> o(kCopies);
    for (auto& g : o) sync::zen_decode_pull<Index>(w.layout, w.blocks, w.block_bytes, g);
    return o;
  }();
  sync::EntryFold f;
  std::size_t k = 0;
  for (auto _ : state) {
    f = sync::fold_entries(outs[k].indices.data(), outs[k].values.data(), outs[k].nnz());
    benchmark::DoNotOptimize(f.sum);
    k = (k + 1) % kCopies;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * f.count));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.blocks.size()));
}

// Records bytes/s per benchmark to print ratios against memcpy after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      // With --benchmark_repetitions, keep the median row (keyed by the benchmark's own name).
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      auto it = r.counters.find("bytes_per_second");
      const auto& args = r.run_name.args;  // e.g. "1" of BM_ZenAggregateEncode/1
      const std::string name = r.run_name.function_name + (args.empty() ? "" : "/" + args);
      if (it != r.counters.end()) rates[name] = it->second.value;
    }
  }
  std::map<std::string, double> rates;
};

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(167772 * 8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPartition)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPartitionCold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenAggregateEncode)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenAggregateEncodeSparse)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenAggregateEncodeCold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenAggregateEncodeSparseCold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BitmapEncode)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPullDecode)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPullDecodeCold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPullFold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPullFoldCold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SortedFoldCold)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  atl::util::keep_freed_memory();  // as build/atoll
  benchmark::Initialize(&argc, argv);
  workload();
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  double memcpy_rate = 0;
  for (const auto& [name, rate] : reporter.rates)
    if (name.rfind("BM_Memcpy", 0) == 0) memcpy_rate = rate;
  if (memcpy_rate > 0) {
    std::cout << "\nthroughput relative to memcpy of the same bytes (memcpy " << memcpy_rate / 1e9
              << " GB/s in this run):\n";
    for (const auto& [name, rate] : reporter.rates) {
      if (name.rfind("BM_Memcpy", 0) == 0) continue;
      std::cout << "  " << name << ": " << rate / memcpy_rate * 100 << "% of memcpy\n";
    }
  }
  benchmark::Shutdown();
  return 0;
}
