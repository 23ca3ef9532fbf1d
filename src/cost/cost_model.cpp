#include "atoll/cost/cost_model.h"

#include <algorithm>
#include <cmath>

namespace atl::cost {
namespace {
double coo_bytes(const SparsityProfile& p) { return p.index_bytes + 4.0; }
double nnz(const SparsityProfile& p) { return p.density * static_cast<double>(p.elements); }
double frac(const SparsityProfile& p) { return (p.ranks - 1.0) / p.ranks; }
}  // namespace

double allreduce_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = 2.0 * frac(p) * 4.0 * static_cast<double>(p.elements);
  return 2.0 * (p.ranks - 1) * net.latency_s + bytes / net.bandwidth_bytes_per_s;
}

double agsparse_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = (p.ranks - 1.0) * nnz(p) * coo_bytes(p);
  return (p.ranks - 1) * net.latency_s + bytes / net.bandwidth_bytes_per_s;
}

double sparcml_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const int rounds = static_cast<int>(std::ceil(std::log2(p.ranks)));
  const double dense_bytes = 4.0 * static_cast<double>(p.elements);
  double t = 0;
  for (int i = 1; i <= rounds; ++i) {
    const double gamma =
        i - 1 < static_cast<int>(p.gamma_pow2.size()) ? p.gamma_pow2[i - 1] : p.gamma_n;
    t += net.latency_s +
         std::min(gamma * nnz(p) * coo_bytes(p), dense_bytes) / net.bandwidth_bytes_per_s;
  }
  return t;
}

double zen_coo_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = frac(p) * (p.gamma_n + 1.0) * nnz(p) * coo_bytes(p);
  return 2.0 * (p.ranks - 1) * net.latency_s + bytes / net.bandwidth_bytes_per_s;
}

double zen_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double push = frac(p) * nnz(p) * coo_bytes(p);
  const double agg_nnz = p.gamma_n * nnz(p);
  const double pull = frac(p) * std::min(agg_nnz * coo_bytes(p),
                                         static_cast<double>(p.elements) / 8.0 + agg_nnz * 4.0);
  return 2.0 * (p.ranks - 1) * net.latency_s + (push + pull) / net.bandwidth_bytes_per_s;
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
  return 2.0 * (p.ranks - 1) * net.latency_s + (push + pull) / net.bandwidth_bytes_per_s;
}

double sparse_ps_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double bytes = frac(p) * (p.gamma_n + 1.0) * nnz(p) * coo_bytes(p) * std::max(1.0, p.skew);
  return 2.0 * (p.ranks - 1) * net.latency_s + bytes / net.bandwidth_bytes_per_s;
}

double omnireduce_time(const SparsityProfile& p, const Network& net) {
  if (p.ranks <= 1) return 0;
  const double blocks = p.block_density * static_cast<double>(p.elements) / p.block_elements;
  const double block_bytes = p.block_elements * 4.0 + p.index_bytes;
  const double bytes =
      frac(p) * (p.block_gamma_n + 1.0) * blocks * block_bytes * std::max(1.0, p.skew);
  return 2.0 * (p.ranks - 1) * net.latency_s + bytes / net.bandwidth_bytes_per_s;
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
