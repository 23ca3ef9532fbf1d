// atoll-index-coding: what each index format would cost on Zen's real pull blocks (issue 18,
// item 4). In one process it builds the blocks a Zen synchronization pulls: N ranks' synthetic
// gradients (bench sync's generator: M elements, density d, Zipf s, the same seed), partitioned by
// owner and summed per server as Zen's push and aggregation do, cut into Zen's byte-balanced pull
// chunks. For every block (server x chunk) it counts the index part's bytes as the hash bitmap,
// as COO (4-byte indices), as Elias–Fano (atoll/sparse/elias_fano.h, round-tripped on every block
// to check it is exact), as Elias–Fano of the empty slots (the code zen_ef uses for dense blocks,
// also round-tripped), and the entropy bound log2 C(slots, nnz); Zen picks bitmap or COO per block,
// "best3" adds Elias–Fano, "best" (what zen_ef sends) both Elias–Fano codes. Prints one JSON line
// per density (docs/results/index-coding.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "atoll/sparse/elias_fano.h"
#include "atoll/sparse/generator.h"
#include "atoll/sync/scheme.h"
#include "atoll/sync/zen_partition.h"

using namespace atl;
using Index = std::uint32_t;

namespace {

constexpr std::uint32_t kChunks = 8;  // Zen's pull chunks (src/sync/zen.cpp)
constexpr double kHeader = 1 + 8;     // a pull block's format byte and count

// The servers' sums after Zen's push of every rank's gradient.
std::vector<sync::ZenServerSums<Index>> server_sums(const sparse::GeneratorOptions& g,
                                                    std::uint32_t n, const sync::HashLayout& layout,
                                                    const std::vector<std::uint64_t>& buckets) {
  std::vector<std::vector<sparse::Entry<Index>>> received(n);
  sync::HashPartition<Index> part;
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto grad = sparse::generate_gradient<Index>(g, static_cast<int>(r));
    sync::zen_partition(grad, layout, part);
    std::size_t at = 0;
    for (std::uint32_t j = 0; j < n; ++j) {
      received[j].insert(received[j].end(), part.entries.begin() + static_cast<std::ptrdiff_t>(at),
                         part.entries.begin() + static_cast<std::ptrdiff_t>(at + part.counts[j]));
      at += part.counts[j];
    }
  }
  std::vector<sync::ZenServerSums<Index>> sums(n);
  for (std::uint32_t j = 0; j < n; ++j)
    sync::zen_aggregate(layout, j, received[j], buckets, sums[j]);
  return sums;
}

// Each block's density (non-zeros / slots), over all blocks and over those each code wins: the
// empty-slot code pays where blocks are nearly full, which Zipf's head makes common.
class BlockDensities {
 public:
  void add(std::uint64_t nnz, std::uint64_t slots, const char* code) {
    if (slots == 0) return;
    const double d = static_cast<double>(nnz) / static_cast<double>(slots);
    all_.push_back(d);
    by_code_[code].push_back(d);
  }
  nlohmann::json to_json() {
    nlohmann::json j = quantiles(all_);
    for (auto& [code, v] : by_code_) j["by_code"][code] = quantiles(v);
    return j;
  }

 private:
  static nlohmann::json quantiles(std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[static_cast<std::size_t>(q * (v.size() - 1) + 0.5)]; };
    if (v.empty()) return {{"blocks", 0}};
    return {{"blocks", v.size()}, {"min", v.front()}, {"p10", at(0.1)},
            {"median", at(0.5)},  {"p90", at(0.9)},   {"max", v.back()}};
  }
  std::vector<double> all_;
  std::map<std::string, std::vector<double>> by_code_;
};

nlohmann::json measure(const sparse::GeneratorOptions& g, std::uint32_t n) {
  const sync::HashLayout layout(g.elements, n, sync::SchemeOptions{}.hash_seed);  // Zen's default
  const auto buckets = sync::zen_granule_bounds(g.elements, sync::zen_pull_buckets(g.elements));
  const auto sums = server_sums(g, n, layout, buckets);
  const std::size_t H = buckets.size() - 1;
  std::vector<std::uint64_t> bucket_nnz(n * H);
  for (std::uint32_t j = 0; j < n; ++j)
    std::copy(sums[j].bucket_nnz.begin(), sums[j].bucket_nnz.end(), bucket_nnz.begin() + j * H);
  const auto bounds = sync::zen_balanced_chunks(layout, buckets, bucket_nnz, kChunks);
  double bitmap = 0, coo = 0, zen = 0, ef = 0, efc = 0, best3 = 0, best = 0, entropy = 0;
  double values = 0, blocks = 0, big_best = 0, big_best3 = 0, big_ef = 0, big_entropy = 0;
  double decode_s = 0;
  std::uint64_t nnz_total = 0, ef_blocks = 0, efc_blocks = 0;
  std::vector<std::uint64_t> positions, empties, decoded;
  std::vector<std::uint8_t> code;
  BlockDensities densities;
  for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
    for (std::uint32_t j = 0; j < n; ++j) {
      const std::size_t w0 = layout.granules_before(j, bounds[p]);
      const std::size_t w1 = layout.granules_before(j, bounds[p + 1]);
      const std::uint64_t slots = (w1 - w0) * sync::kZenGranule;
      positions.clear(), empties.clear();
      for (std::size_t w = w0; w < w1; ++w) {
        for (std::uint64_t word = sums[j].words[w]; word != 0; word &= word - 1)
          positions.push_back((w - w0) * 64 + static_cast<unsigned>(std::countr_zero(word)));
        for (std::uint64_t word = ~sums[j].words[w]; word != 0; word &= word - 1)
          empties.push_back((w - w0) * 64 + static_cast<unsigned>(std::countr_zero(word)));
      }
      const auto k = positions.size();
      code.clear();
      sparse::elias_fano_encode(positions, slots, code);
      const auto t0 = std::chrono::steady_clock::now();
      sparse::elias_fano_decode(code, slots, k, decoded);
      decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (decoded != positions) throw std::runtime_error("Elias-Fano round trip differs");
      const double e = static_cast<double>(code.size());
      code.clear();
      sparse::elias_fano_encode(empties, slots, code);
      sparse::elias_fano_decode(code, slots, empties.size(), decoded);
      if (decoded != empties)
        throw std::runtime_error("Elias-Fano (empty slots) round trip differs");
      const double b = slots / 8.0, c = 4.0 * k, ec = static_cast<double>(code.size());
      const double z = std::min(b, c), three = std::min(z, e), all = std::min(three, ec);
      bitmap += b, coo += c, zen += z, ef += e, efc += ec, best3 += three, best += all;
      values += 4.0 * k, ++blocks;
      // Which code zen_ef sends (ties: bitmap, indices, Elias-Fano, of the empty slots).
      const bool ef_wins = e < z && e <= ec, efc_wins = ec < three;
      ef_blocks += ef_wins, efc_blocks += efc_wins;
      densities.add(k, slots,
                    efc_wins  ? "elias_fano_empty_slots"
                    : ef_wins ? "elias_fano"
                    : b <= c  ? "bitmap"
                              : "coo");
      const double bound = sparse::subset_entropy_bits(slots, k) / 8;
      entropy += bound;
      if (k >= 64) {
        big_best += all + kHeader, big_best3 += three + kHeader, big_ef += e + kHeader;
        big_entropy += bound;
      }
      nnz_total += k;
    }
  }
  const double headers = kHeader * blocks;
  nlohmann::json j;
  j["ranks"] = n, j["elements"] = g.elements, j["density"] = g.density, j["zipf"] = g.zipf_exponent;
  j["blocks"] = blocks, j["nnz_summed"] = nnz_total;
  j["index_bytes"] = {{"bitmap", bitmap},
                      {"coo", coo},
                      {"zen", zen},
                      {"elias_fano", ef},
                      {"elias_fano_empty_slots", efc},
                      {"best3", best3},
                      {"best", best},
                      {"entropy_bound", entropy}};
  j["blocks_elias_fano_smallest"] = ef_blocks;
  j["blocks_elias_fano_empty_smallest"] = efc_blocks;
  j["block_density"] = densities.to_json();  // by_code: the blocks where zen_ef sends that code
  j["value_bytes"] = values, j["header_bytes"] = headers;
  j["pulled_bytes"] = {{"zen", zen + values + headers},
                       {"best3", best3 + values + headers},
                       {"best", best + values + headers}};
  // The target: encoded index bytes (headers counted) over the entropy bounds, blocks >= 64 nnz.
  j["big_blocks_ratio"] = {{"best", big_best / big_entropy},
                           {"best3", big_best3 / big_entropy},
                           {"elias_fano", big_ef / big_entropy}};
  j["elias_fano_decode_ns_per_index"] = nnz_total ? decode_s * 1e9 / nnz_total : 0.0;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"index formats on Zen's pull blocks: bitmap, COO, Elias-Fano, entropy bound"};
  std::uint32_t ranks = 16;
  sparse::GeneratorOptions g;
  g.elements = std::uint64_t{1} << 24;
  g.zipf_exponent = 1.1;
  std::vector<double> densities{0.001, 0.01, 0.05};
  app.add_option("--ranks", ranks, "ranks (servers)")->check(CLI::Range(1u, 65536u));
  app.add_option("--elements", g.elements, "element count M");
  app.add_option("--densities", densities, "densities per rank")->delimiter(',');
  app.add_option("--zipf", g.zipf_exponent, "Zipf exponent");
  app.add_option("--seed", g.seed, "generator seed (bench sync's default: 1)");
  CLI11_PARSE(app, argc, argv);
  try {
    for (double d : densities) {
      g.density = d;
      sparse::validate(g);
      std::cout << measure(g, ranks).dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "atoll-index-coding: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
