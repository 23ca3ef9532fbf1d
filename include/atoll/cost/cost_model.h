// The alpha-beta cost model shared by the scheme selector (`auto`), the benchmarks and the docs.
// time = α · rounds + bytes / b: a round is one step of the scheme's critical path (messages sent
// to all peers at once are one round: they travel together). A per-message overhead (posting n − 1
// messages one after another) is left out: SMPI charges none, and the probe does not measure one.
// Sources: Zen (OSDI'25) Eq. 1 (balanced
// parallelism) and Eq. 2 (hierarchical centralization, SparCML), plus the latency terms the paper
// leaves out, counted from each scheme's exchanges (cost_model.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace atl::cost {

struct Network {
  double latency_s = 5e-6;                  // α: per round (the slowest pair's one-way time)
  double bandwidth_bytes_per_s = 25e9 / 8;  // b: per direction per rank (full duplex NIC)
};

// What the models need to know about one synchronization call (measured or estimated).
struct SparsityProfile {
  int ranks = 1;                   // n
  std::uint64_t elements = 0;      // M
  double density = 0;              // d_G: mean local nnz / M
  std::vector<double> gamma_pow2;  // γ_{2^i} for i = 0..log2(n) (γ_1 = 1)
  double gamma_n = 1;              // γ_n: density of the sum / d_G
  double skew = 1;                 // max contiguous-range share of the aggregated load × n
  double block_density = 0;        // share of OmniReduce blocks holding a non-zero (local)
  double block_gamma_n = 1;        // densification of non-zero blocks across n ranks
  std::uint64_t block_elements = 256;
  int index_bytes = 4;
  // Zen's exchanges one after another: the push's (counts, then entries) and the pull's (counts,
  // then each chunk); 1 each where they need no counts first (zen_partition.h,
  // zen_exchanges_without_counts).
  std::uint32_t zen_push_rounds = 2;
  std::uint32_t zen_pull_rounds = 2;
};

struct Estimate {
  std::string scheme;
  double time_s = 0;
};

double allreduce_time(const SparsityProfile& p, const Network& net);
double agsparse_time(const SparsityProfile& p, const Network& net);
double sparcml_time(const SparsityProfile& p, const Network& net);  // Eq. 2 + latency
double omnireduce_time(const SparsityProfile& p, const Network& net);
double sparse_ps_time(const SparsityProfile& p, const Network& net);
double zen_coo_time(const SparsityProfile& p, const Network& net);  // Eq. 1 + latency
// Eq. 1 with the pull's keys as zen codes them: indices where at most 1/kZenCooKeyShare of the
// bitmap (zen_partition.h), else the bitmap, which may be the larger.
double zen_time(const SparsityProfile& p, const Network& net);
// Eq. 1 with the smallest of bitmap, COO and Elias-Fano index bytes in the pull (network only:
// the model does not charge Elias-Fano's extra decode work; auto's trial calls measure it).
double zen_ef_time(const SparsityProfile& p, const Network& net);

// All of the above, fastest first.
std::vector<Estimate> rank_schemes(const SparsityProfile& p, const Network& net);

}  // namespace atl::cost
