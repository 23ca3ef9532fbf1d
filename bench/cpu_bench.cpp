// CPU cost of Zen's data path (partition, server aggregation, bitmap encode/decode, pull decode)
// in non-zeros per second, beside a memcpy of the same bytes measured in the same run.
// Workload: the bench sync default (M = 2^24, density 1%, Zipf 1.1), n = 16 servers.
// Prints Google Benchmark's table, then the ratio of each step's byte throughput to memcpy's.
#include <benchmark/benchmark.h>

#include <cstring>
#include <iostream>
#include <map>

#include "atoll/sparse/generator.h"
#include "atoll/util/allocator.h"
#include "atoll/sync/zen_partition.h"
#include "../src/sync/common.h"

namespace {

using namespace atl;
using Index = std::uint32_t;
constexpr std::uint32_t kServers = 16;

struct Workload {
  std::vector<sparse::SparseGradient<Index>> workers;
  sync::HashLayout<Index> layout;
  std::vector<sparse::Entry<Index>> server0_received;  // what server 0 receives in the push
  std::vector<float> server0_slots;                    // its aggregate over 𝕀_0
  std::vector<sync::BitmapBlock> blocks;               // every server's pull block

  Workload() {
    sparse::GeneratorOptions g;
    g.elements = std::uint64_t{1} << 24;
    g.density = 0.01;
    for (std::uint32_t r = 0; r < kServers; ++r)
      workers.push_back(sparse::generate_gradient<Index>(g, static_cast<int>(r)));
    layout = sync::HashLayout<Index>(g.elements, kServers, 7);
    std::vector<std::vector<float>> slots(kServers);
    for (std::uint32_t j = 0; j < kServers; ++j) slots[j].assign(layout.member_count(j), 0.0f);
    for (const auto& w : workers) {
      const auto part = sync::zen_partition(w, kServers, 7);
      server0_received.insert(server0_received.end(), part.entries.begin(),
                              part.entries.begin() + part.counts[0]);
      for (const auto& e : part.entries) {
        slots[sync::zen_owner(e.index, kServers, 7)][layout.slot(e.index)] += e.value;
      }
    }
    server0_slots = slots[0];
    for (std::uint32_t j = 0; j < kServers; ++j) blocks.push_back(sync::bitmap_encode(slots[j]));
  }
};

const Workload& workload() {
  static const Workload w;  // built once per process; benchmarks only read it
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

void BM_ZenPartition(benchmark::State& state) {
  const auto& g = workload().workers[0];
  for (auto _ : state) {
    auto part = sync::zen_partition(g, kServers, 7);
    benchmark::DoNotOptimize(part.entries.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * g.nnz()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * g.nnz() * 8));
}

void BM_ZenAggregate(benchmark::State& state) {
  const auto& w = workload();
  const auto members = w.layout.members(0);
  for (auto _ : state) {
    auto received = w.server0_received;
    std::vector<Index> idx;
    std::vector<float> val;
    sync::aggregate_owned<Index>(
        received, members.size(), [&](Index x) { return w.layout.slot(x); },
        [&](std::size_t s) { return members[s]; }, idx, val);
    benchmark::DoNotOptimize(idx.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * w.server0_received.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.server0_received.size() * 8));
}

void BM_BitmapEncode(benchmark::State& state) {
  const auto& w = workload();
  for (auto _ : state) {
    auto block = sync::bitmap_encode(w.server0_slots);
    benchmark::DoNotOptimize(block.bitmap.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * w.blocks[0].values.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(
      state.iterations() * (w.blocks[0].bitmap.size() + 4 * w.blocks[0].values.size())));
}

void BM_BitmapDecode(benchmark::State& state) {
  const auto& w = workload();
  const auto& b = w.blocks[0];
  for (auto _ : state) {
    std::vector<Index> idx;
    std::vector<float> val;
    idx.reserve(b.values.size());
    val.reserve(b.values.size());
    sync::bitmap_decode<Index>(b.bitmap, b.values, w.layout.members(0), idx, val);
    benchmark::DoNotOptimize(idx.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * b.values.size()));
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * (b.bitmap.size() + 4 * b.values.size())));
}

// A rank's whole pull decode: every server's block, then one sorted result.
void BM_ZenPullDecode(benchmark::State& state) {
  const auto& w = workload();
  std::size_t total = 0, bytes = 0;
  for (const auto& b : w.blocks) {
    total += b.values.size();
    bytes += b.bitmap.size() + 4 * b.values.size();
  }
  for (auto _ : state) {
    std::vector<Index> idx;
    std::vector<float> val;
    idx.reserve(total);
    val.reserve(total);
    for (std::uint32_t j = 0; j < kServers; ++j)
      sync::bitmap_decode<Index>(w.blocks[j].bitmap, w.blocks[j].values, w.layout.members(j), idx, val);
    sync::sort_unique_by_index(w.layout.elements(), idx, val);
    benchmark::DoNotOptimize(idx.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * total));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// Records bytes/s per benchmark to print ratios against memcpy after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) rates[r.benchmark_name()] = it->second.value;
    }
  }
  std::map<std::string, double> rates;
};

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(167772 * 8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPartition)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenAggregate)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BitmapEncode)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BitmapDecode)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZenPullDecode)->Unit(benchmark::kMillisecond);

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
    std::cout << "\nthroughput relative to memcpy of the same bytes (memcpy "
              << memcpy_rate / 1e9 << " GB/s):\n";
    for (const auto& [name, rate] : reporter.rates) {
      if (name.rfind("BM_Memcpy", 0) == 0) continue;
      std::cout << "  " << name << ": " << rate / memcpy_rate * 100 << "% of memcpy\n";
    }
  }
  benchmark::Shutdown();
  return 0;
}
