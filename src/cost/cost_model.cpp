#include "atoll/cost/cost_model.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "atoll/sync/zen_partition.h"

namespace atl::cost {
namespace {
double coo_bytes(const SparsityProfile& p) { return p.index_bytes + 4.0; }
double nnz(const SparsityProfile& p) { return p.density * static_cast<double>(p.elements); }
double frac(const SparsityProfile& p) { return (p.ranks - 1.0) / p.ranks; }
double log2n(const SparsityProfile& p) { return std::ceil(std::log2(p.ranks)); }
// `rounds` exchanges one after another on the critical path.
double latency(const Network& net, double rounds) { return rounds * net.latency_s; }
// An allgatherv: its counts by recursive doubling (log2 n rounds), its data around a ring (n − 1).
double allgatherv_latency(const SparsityProfile& p, const Network& net) {
  return latency(net, log2n(p) + p.ranks - 1.0);
}
// An alltoall of counts then an alltoallv of data, each to every peer at once.
double push_latency(const Network& net) { return latency(net, 2); }
// Zen's push (counts, then entries) and pull (counts, then its chunks one after another), or each
// in one exchange; every exchange to every peer at once.
double zen_latency(const SparsityProfile& p, const Network& net) {
  const double rounds =
      std::max<std::uint32_t>(1, p.zen_push_rounds) + std::max<std::uint32_t>(1, p.zen_pull_rounds);
  return latency(net, rounds);
}
}  // namespace

double allreduce_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = 2.0 * frac(p) * 4.0 * static_cast<double>(p.elements);
  // Rabenseifner's reduce-scatter and allgather (recursive halving and doubling), which MPI
  // libraries pick for long vectors: 2 log2 n rounds (a ring would take 2(n − 1)).
  return latency(net, 2 * log2n(p)) + bytes / net.bandwidth_bytes_per_s;
}

double agsparse_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = (p.ranks - 1.0) * nnz(p) * coo_bytes(p);
  return allgatherv_latency(p, net) + bytes / net.bandwidth_bytes_per_s;
}

double sparcml_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  // Recursive doubling over the largest power of two of ranks, each round a size then the data
  // to one partner; the ranks beyond it fold in before (their gradient) and get the sum after.
  const int rounds = std::bit_width(static_cast<unsigned>(p.ranks)) - 1;
  const double dense_bytes = 4.0 * static_cast<double>(p.elements);
  auto round_bytes = [&](double gamma) {
    return std::min(gamma * nnz(p) * coo_bytes(p), dense_bytes);
  };
  double t = 0;
  if ((p.ranks & (p.ranks - 1)) != 0) {
    t += latency(net, 2) + (round_bytes(1) + round_bytes(p.gamma_n)) / net.bandwidth_bytes_per_s;
  }
  for (int i = 1; i <= rounds; ++i) {
    const double gamma =
        i - 1 < static_cast<int>(p.gamma_pow2.size()) ? p.gamma_pow2[i - 1] : p.gamma_n;
    t += latency(net, 1) + round_bytes(gamma) / net.bandwidth_bytes_per_s;
  }
  return t;
}

double zen_coo_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = frac(p) * (p.gamma_n + 1.0) * nnz(p) * coo_bytes(p);
  return zen_latency(p, net) + bytes / net.bandwidth_bytes_per_s;
}

double zen_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double push = frac(p) * nnz(p) * coo_bytes(p);
  const double agg_nnz = p.gamma_n * nnz(p);
  // The pull's keys as zen_pull_format codes them at the average aggregated density: indices only
  // where they are at most 1/kZenCooKeyShare of the bitmap, so zen may send more than zen_coo.
  const double coo_keys = agg_nnz * p.index_bytes;
  const double bitmap_keys = static_cast<double>(p.elements) / 8.0;
  const double keys =
      coo_keys * static_cast<double>(sync::kZenCooKeyShare) <= bitmap_keys ? coo_keys : bitmap_keys;
  const double pull = frac(p) * (keys + agg_nnz * 4.0);
  return zen_latency(p, net) + (push + pull) / net.bandwidth_bytes_per_s;
}

double zen_ef_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double push = frac(p) * nnz(p) * coo_bytes(p);
  const double agg_nnz = std::max(1.0, p.gamma_n * nnz(p));
  const double M = static_cast<double>(p.elements);
  // Elias-Fano of k positions: floor(log2(M / k)) low bits each plus about 2 high bits
  // (elias_fano.h); of the non-zero slots, or of the empty ones (the code for dense blocks).
  const auto ef = [M](double k) {
    const double low = std::floor(std::log2(std::max(1.0, M / k)));
    return (k * (low + 1.0) + M / std::exp2(low)) / 8.0;
  };
  const double keys =
      std::min({agg_nnz * p.index_bytes, M / 8.0, ef(agg_nnz), ef(std::max(1.0, M - agg_nnz))});
  const double pull = frac(p) * (keys + agg_nnz * 4.0);
  return zen_latency(p, net) + (push + pull) / net.bandwidth_bytes_per_s;
}

double sparse_ps_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = frac(p) * (p.gamma_n + 1.0) * nnz(p) * coo_bytes(p) * std::max(1.0, p.skew);
  return push_latency(net) + allgatherv_latency(p, net) + bytes / net.bandwidth_bytes_per_s;
}

double omnireduce_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double blocks = p.block_density * static_cast<double>(p.elements) / p.block_elements;
  const double block_bytes = p.block_elements * 4.0 + p.index_bytes;
  const double bytes =
      frac(p) * (p.block_gamma_n + 1.0) * blocks * block_bytes * std::max(1.0, p.skew);
  return push_latency(net) + allgatherv_latency(p, net) + bytes / net.bandwidth_bytes_per_s;
}

std::vector<Estimate> rank_schemes(const SparsityProfile& p, const Network& net) {
  std::vector<Estimate> e{{"allreduce", allreduce_time(p, net)},
                          {"agsparse", agsparse_time(p, net)},
                          {"sparcml", sparcml_time(p, net)},
                          {"omnireduce", omnireduce_time(p, net)},
                          {"sparse_ps", sparse_ps_time(p, net)},
                          {"zen_coo", zen_coo_time(p, net)},
                          {"zen", zen_time(p, net)},
                          {"zen_ef", zen_ef_time(p, net)}};
  std::stable_sort(e.begin(), e.end(),
                   [](const Estimate& a, const Estimate& b) { return a.time_s < b.time_s; });
  return e;
}

}  // namespace atl::cost
