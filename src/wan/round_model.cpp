#include "atoll/wan/round_model.h"

#include <fmt/format.h>
#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

namespace atl::wan {

namespace {

// Caps on the latest first arrival beyond the unstaggered clique's (seconds), tried by
// clique_cost when a multicast clique is throttled.
constexpr double kStaggerCapsS[] = {0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05};

// Multicast + FPGA with sender start offsets (round_model.h): the throttled rate, the buffer at
// line rate and the time.
CliqueCost multicast_cost(const Topology& t, const Clique& clique, const RoundOptions& o,
                          std::uint64_t chunk_bytes, std::vector<double> offsets) {
  CliqueCost cost;
  cost.chunk_bytes = chunk_bytes;
  const std::size_t k = clique.size();
  double rate = std::numeric_limits<double>::infinity();
  for (auto m : clique) {
    rate = std::min({rate, t.site(m).egress_bytes_per_s, t.site(m).ingress_bytes_per_s});
  }
  const double line_rate = rate;
  const double min_rate = kMinRateFraction * line_rate;
  const double fixed = static_cast<double>(k - 1) * static_cast<double>(chunk_bytes);
  double last_arrival = 0;
  for (std::size_t ri = 0; ri < k; ++ri) {
    const std::size_t r = clique[ri];
    double latest = 0;  // A_r
    for (std::size_t si = 0; si < k; ++si)
      if (si != ri) latest = std::max(latest, offsets[si] + t.latency_s(clique[si], r));
    last_arrival = std::max(last_arrival, latest);
    std::vector<double> skews;
    for (std::size_t si = 0; si < k; ++si)
      if (si != ri)
        skews.push_back(std::max(0.0, latest - offsets[si] - t.latency_s(clique[si], r)));
    // B_r(R) = Σ_s min(R·skew_s, S) + (k−1)·chunk·(1 + R/I_r): a stream never holds more than
    // its payload; a complete chunk stays while its sum crosses the ingress link (chunk / I_r),
    // during which the next arrives at R.
    const double ingress = t.site(r).ingress_bytes_per_s;
    auto buffer = [&](double R) {
      double b = fixed * (1 + R / ingress);
      for (double skew : skews) b += std::min(R * skew, o.payload_bytes);
      return b;
    };
    const double memory = static_cast<double>(t.site(r).fpga_memory_bytes);
    cost.buffer_bytes = std::max(cost.buffer_bytes, buffer(line_rate));
    if (buffer(min_rate) > memory) {  // no usable rate fits (the header's feasibility rule)
      cost.feasible = false;
      cost.time_s = std::numeric_limits<double>::infinity();
      return cost;
    }
    if (buffer(rate) > memory) {  // largest R with B_r(R) <= M_r (B_r is increasing in R)
      double lo = min_rate, hi = rate;
      for (int it = 0; it < 200 && hi - lo > 1e-9 * hi; ++it) {
        const double mid = 0.5 * (lo + hi);
        (buffer(mid) <= memory ? lo : hi) = mid;
      }
      rate = lo;
    }
  }
  cost.throttled = rate < line_rate;
  cost.rate_bytes_per_s = rate;
  cost.time_s = last_arrival + o.payload_bytes / rate;
  cost.start_offset_s = std::move(offsets);
  return cost;
}

// Sender start offsets (clique order, the earliest 0) that minimise the largest memory-weighted
// skew sum max_r Σ_{s≠r} skew_sr / M_r with every first arrival A_r ≤ cap, then, at that skew,
// the latest first arrival. A linear program (GLPK simplex): variables δ_s ≥ 0, A_r, z, T;
//   A_r − δ_s ≥ ℓ_sr (s ≠ r),  w_r·((k−1)·A_r − Σ_{s≠r} δ_s) − z ≤ w_r·Σ_{s≠r} ℓ_sr,
//   T − A_r ≥ 0,  T ≤ cap;  minimise z, then T with z fixed.
// w_r = M_min / M_r. std::nullopt if the cap cannot be met or the solver fails.
std::optional<std::vector<double>> least_skew_offsets(const Topology& t, const Clique& clique,
                                                      double cap) {
  const int k = static_cast<int>(clique.size());
  double min_memory = std::numeric_limits<double>::infinity();
  for (auto m : clique)
    min_memory = std::min(min_memory, static_cast<double>(t.site(m).fpga_memory_bytes));
  std::unique_ptr<glp_prob, decltype(&glp_delete_prob)> lp(glp_create_prob(), glp_delete_prob);
  glp_prob* p = lp.get();
  // Columns: δ_0..δ_{k-1} = 1..k, A_0..A_{k-1} = k+1..2k, z = 2k+1, T = 2k+2.
  const int z = 2 * k + 1, T = 2 * k + 2;
  glp_add_cols(p, 2 * k + 2);
  for (int i = 1; i <= k; ++i) glp_set_col_bnds(p, i, GLP_LO, 0, 0);
  for (int i = k + 1; i <= 2 * k; ++i) glp_set_col_bnds(p, i, GLP_FR, 0, 0);
  glp_set_col_bnds(p, z, GLP_LO, 0, 0);
  if (std::isfinite(cap))
    glp_set_col_bnds(p, T, GLP_DB, 0, cap);
  else
    glp_set_col_bnds(p, T, GLP_LO, 0, 0);
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  auto entry = [&](int row, int col, double v) {
    ia.push_back(row);
    ja.push_back(col);
    ar.push_back(v);
  };
  for (int r = 0; r < k; ++r) {
    const double w = min_memory / static_cast<double>(t.site(clique[r]).fpga_memory_bytes);
    double latency_sum = 0;
    for (int s = 0; s < k; ++s) {
      if (s == r) continue;
      const double l = t.latency_s(clique[s], clique[r]);
      latency_sum += l;
      const int row = glp_add_rows(p, 1);  // A_r − δ_s ≥ ℓ_sr
      glp_set_row_bnds(p, row, GLP_LO, l, 0);
      entry(row, k + 1 + r, 1);
      entry(row, 1 + s, -1);
    }
    int row = glp_add_rows(p, 1);  // weighted skew sum at r ≤ z
    glp_set_row_bnds(p, row, GLP_UP, 0, w * latency_sum);
    entry(row, k + 1 + r, w * (k - 1));
    for (int s = 0; s < k; ++s)
      if (s != r) entry(row, 1 + s, -w);
    entry(row, z, -1);
    row = glp_add_rows(p, 1);  // T ≥ A_r
    glp_set_row_bnds(p, row, GLP_LO, 0, 0);
    entry(row, T, 1);
    entry(row, k + 1 + r, -1);
  }
  glp_load_matrix(p, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  glp_set_obj_dir(p, GLP_MIN);
  glp_set_obj_coef(p, z, 1);
  if (glp_simplex(p, &parm) != 0 || glp_get_status(p) != GLP_OPT) return std::nullopt;
  const double best_z = glp_get_col_prim(p, z);
  glp_set_col_bnds(p, z, GLP_DB, 0, best_z * (1 + 1e-9) + 1e-12);
  glp_set_obj_coef(p, z, 0);
  glp_set_obj_coef(p, T, 1);
  if (glp_simplex(p, &parm) != 0 || glp_get_status(p) != GLP_OPT) return std::nullopt;
  std::vector<double> offsets(static_cast<std::size_t>(k));
  double earliest = std::numeric_limits<double>::infinity();
  for (int s = 0; s < k; ++s) {
    offsets[static_cast<std::size_t>(s)] = glp_get_col_prim(p, 1 + s);
    earliest = std::min(earliest, offsets[static_cast<std::size_t>(s)]);
  }
  for (auto& d : offsets) d = std::max(0.0, d - earliest);
  return offsets;
}

// Multicast + FPGA cost of one clique at a given aggregation unit: unstaggered, and if that is
// throttled, the staggered candidates too (the fastest wins). The staggered offsets do not depend
// on the unit, so they are solved once per clique, on first need, and reused for every unit.
class MulticastCosts {
 public:
  MulticastCosts(const Topology& t, const Clique& clique, const RoundOptions& o)
      : t_(t), clique_(clique), o_(o) {}

  CliqueCost at(std::uint64_t chunk_bytes) {
    const std::size_t k = clique_.size();
    CliqueCost best = multicast_cost(t_, clique_, o_, chunk_bytes, std::vector<double>(k, 0.0));
    if (!best.feasible || !best.throttled) return best;  // staggering cannot beat line rate
    for (const auto& offsets : staggered()) {
      auto candidate = multicast_cost(t_, clique_, o_, chunk_bytes, offsets);
      if (candidate.time_s < best.time_s * (1 - 1e-9)) best = std::move(candidate);
    }
    return best;
  }

 private:
  // Candidates: the least skew whatever the extra latency, and the least skew with the last
  // stream's first arrival at most `extra` after the unstaggered clique's.
  const std::vector<std::vector<double>>& staggered() {
    if (staggered_) return *staggered_;
    double max_latency = 0;
    for (auto s : clique_)
      for (auto r : clique_)
        if (s != r) max_latency = std::max(max_latency, t_.latency_s(s, r));
    std::vector<double> caps{std::numeric_limits<double>::infinity()};
    for (double extra : kStaggerCapsS) caps.push_back(max_latency + extra);
    staggered_.emplace();
    for (double cap : caps)
      if (auto offsets = least_skew_offsets(t_, clique_, cap)) staggered_->push_back(*offsets);
    return *staggered_;
  }

  const Topology& t_;
  const Clique& clique_;
  const RoundOptions& o_;
  std::optional<std::vector<std::vector<double>>> staggered_;
};

// The per-clique unit (round_model.h): the clique's time is non-increasing as the unit shrinks
// (B_r grows with it, for every candidate offset vector), so the smallest unit gives the best
// time and a binary search finds the largest unit that still reaches it.
CliqueCost multicast_best_unit(const Topology& t, const Clique& clique, const RoundOptions& o) {
  MulticastCosts costs(t, clique, o);
  std::vector<std::uint64_t> units;
  for (std::uint64_t u = smallest_chunk_bytes(o.payload_bytes); u <= kLargestChunkBytes; u *= 2)
    units.push_back(u);
  if (units.empty()) units.push_back(smallest_chunk_bytes(o.payload_bytes));
  CliqueCost best = costs.at(units.front());
  if (!best.feasible) return best;
  std::size_t lo = 0, hi = units.size() - 1;  // units[lo] reaches the best time
  while (lo < hi) {
    const std::size_t mid = (lo + hi + 1) / 2;
    auto candidate = costs.at(units[mid]);
    if (candidate.feasible && candidate.time_s <= best.time_s * (1 + 1e-12)) {
      lo = mid;
      best = std::move(candidate);
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

}  // namespace

std::uint64_t smallest_chunk_bytes(double payload_bytes) {
  std::uint64_t floor = 4096;  // simulation limit: at most ~4096 chunks per stream
  while (floor < kLargestChunkBytes && static_cast<double>(floor) * 4096 < payload_bytes)
    floor *= 2;
  return floor;
}

std::uint64_t default_chunk_bytes(const Topology& t, double payload_bytes) {
  std::uint64_t memory = std::numeric_limits<std::uint64_t>::max();
  for (const auto& s : t.sites()) memory = std::min(memory, s.fpga_memory_bytes);
  const std::uint64_t floor = smallest_chunk_bytes(payload_bytes);
  std::uint64_t chunk = kLargestChunkBytes;
  while (chunk > floor && chunk > memory / 8) chunk /= 2;
  return chunk;
}

CliqueCost clique_cost(const Topology& t, const Clique& clique, Transport transport,
                       const RoundOptions& o) {
  if (transport == Transport::best) {
    const auto u = clique_cost(t, clique, Transport::unicast, o);
    const auto m = clique_cost(t, clique, Transport::multicast_fpga, o);
    auto best = m.time_s <= u.time_s ? m : u;
    if (clique.size() > 2) {  // a ring of two is unicast
      const double ring = ring_allreduce_time(t, clique, o);
      if (ring < best.time_s) {
        best = CliqueCost{};
        best.time_s = ring;
        best.kind = ExchangeKind::ring_allreduce;
      }
    }
    return best;
  }
  CliqueCost cost;
  const std::size_t k = clique.size();
  if (k < 2) return cost;  // an idle site
  if (transport == Transport::unicast) {
    double worst = 0, slowest_rate = std::numeric_limits<double>::infinity();
    for (auto s : clique) {
      for (auto r : clique) {
        if (s == r) continue;
        const double link = std::min(t.site(s).egress_bytes_per_s, t.site(r).ingress_bytes_per_s);
        worst = std::max(worst, t.latency_s(s, r) + (k - 1) * o.payload_bytes / link);
        slowest_rate = std::min(slowest_rate, link / (k - 1));
      }
    }
    cost.time_s = worst;
    cost.rate_bytes_per_s = slowest_rate;
    cost.kind = ExchangeKind::unicast;
    return cost;
  }
  if (o.chunk_bytes > 0) return MulticastCosts(t, clique, o).at(o.chunk_bytes);
  return multicast_best_unit(t, clique, o);
}

double round_time(const Topology& t, const Partition& round, Transport transport,
                  const RoundOptions& o) {
  validate_partition(round, t.size());
  double worst = 0;
  for (const auto& clique : round)
    worst = std::max(worst, clique_cost(t, clique, transport, o).time_s);
  return worst + o.compute_s;
}

const char* to_string(ExchangeKind kind) {
  switch (kind) {
    case ExchangeKind::unicast:
      return "unicast";
    case ExchangeKind::multicast_fpga:
      return "multicast_fpga";
    case ExchangeKind::ring_allreduce:
      return "ring_allreduce";
  }
  return "?";
}

ResolvedRound resolve(const Topology& t, const Partition& round, Transport transport,
                      const RoundOptions& o) {
  validate_partition(round, t.size());
  ResolvedRound out;
  for (const auto& clique : round) {
    Exchange e;
    e.sites = clique;
    if (transport == Transport::unicast) {
      e.kind = ExchangeKind::unicast;
    } else if (transport == Transport::multicast_fpga) {
      e.kind = ExchangeKind::multicast_fpga;
    } else {
      e.kind = clique_cost(t, clique, Transport::best, o).kind;
    }
    out.push_back(std::move(e));
  }
  return out;
}

double ring_allreduce_time(const Topology& t, const Clique& ring, const RoundOptions& o) {
  const std::size_t k = ring.size();
  if (k < 2) return 0;
  double bandwidth = std::numeric_limits<double>::infinity();
  std::vector<double> hop(k);  // hop[i]: latency ring[i] -> ring[i+1]
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t a = ring[i], b = ring[(i + 1) % k];
    hop[i] = t.latency_s(a, b);
    bandwidth = std::min({bandwidth, t.site(a).egress_bytes_per_s, t.site(b).ingress_bytes_per_s});
  }
  const std::size_t steps = 2 * (k - 1);
  double path = 0;
  for (std::size_t end = 0; end < k; ++end) {  // the step chain ending with hop `end`
    double sum = 0;
    for (std::size_t u = 0; u < steps; ++u) sum += hop[(end + k * steps - u) % k];
    path = std::max(path, sum);
  }
  return path + static_cast<double>(steps) * o.payload_bytes / static_cast<double>(k) / bandwidth;
}

double exchange_time(const Topology& t, const Exchange& e, const RoundOptions& o) {
  switch (e.kind) {
    case ExchangeKind::unicast:
      return clique_cost(t, e.sites, Transport::unicast, o).time_s;
    case ExchangeKind::multicast_fpga:
      return clique_cost(t, e.sites, Transport::multicast_fpga, o).time_s;
    case ExchangeKind::ring_allreduce:
      return ring_allreduce_time(t, e.sites, o);
  }
  throw std::logic_error("unknown exchange kind");
}

double round_time(const Topology& t, const ResolvedRound& round, const RoundOptions& o) {
  Partition sites;
  for (const auto& e : round) sites.push_back(e.sites);
  validate_partition(sites, t.size());
  double worst = 0;
  for (const auto& e : round) worst = std::max(worst, exchange_time(t, e, o));
  return worst + o.compute_s;
}

}  // namespace atl::wan
