#include "atoll/wan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace atl::wan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void enumerate(std::size_t n, std::vector<int>& block_of, std::size_t next, int blocks,
               std::vector<Partition>& out) {
  if (next == n) {
    Partition p(static_cast<std::size_t>(blocks));
    for (std::size_t i = 0; i < n; ++i) p[static_cast<std::size_t>(block_of[i])].push_back(i);
    for (const auto& c : p)
      if (c.size() < 2) return;
    out.push_back(std::move(p));
    return;
  }
  for (int b = 0; b <= blocks; ++b) {
    block_of[next] = b;
    enumerate(n, block_of, next + 1, std::max(blocks, b + 1), out);
  }
}

// (W - J)x for the clique-averaging W of `round` (x orthogonal to 1 stays so).
void apply(const Partition& round, std::vector<double>& x) {
  for (const auto& c : round) {
    double mean = 0;
    for (auto i : c) mean += x[i];
    mean /= static_cast<double>(c.size());
    for (auto i : c) x[i] = mean;
  }
  const double total = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  for (auto& v : x) v -= total;
}

// ρ = ||(Wb - J)(Wa - J)||₂ by power iteration on (Wa-J)(Wb-J)(Wa-J) (W - J are projections).
double pair_rho(const Partition& a, const Partition& b, std::size_t n) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(1.0 + 7.0 * static_cast<double>(i));
  double lambda = 0;
  for (int it = 0; it < 60; ++it) {
    apply(a, x);
    apply(b, x);
    apply(a, x);
    double norm = 0;
    for (double v : x) norm += v * v;
    norm = std::sqrt(norm);
    if (norm < 1e-300) return 0.0;
    lambda = norm;  // converges to the top eigenvalue of the PSD operator (x normalised below)
    for (auto& v : x) v /= norm;
  }
  return std::sqrt(std::max(0.0, lambda));
}

// The sites of each continent, continents and sites in file order.
Partition continents_of(const Topology& t) {
  std::vector<std::string> continents;
  Partition by_continent;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const auto& c = t.site(i).continent;
    auto it = std::find(continents.begin(), continents.end(), c);
    if (it == continents.end()) {
      continents.push_back(c);
      by_continent.push_back({i});
    } else {
      by_continent[static_cast<std::size_t>(it - continents.begin())].push_back(i);
    }
  }
  return by_continent;
}

std::size_t max_clique(const Schedule& s) {
  std::size_t m = 0;
  for (const auto& r : s)
    for (const auto& c : r) m = std::max(m, c.size());
  return m;
}

}  // namespace

std::optional<double> consensus_time_lower_bound(const Topology& t, const RoundOptions& o,
                                                 double epsilon) {
  const std::size_t n = t.size();
  if (!(epsilon < 1.0 / static_cast<double>(n))) return std::nullopt;
  std::vector<double> d(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) d[i * n + j] = i == j ? 0.0 : t.latency_s(i, j);
  for (std::size_t k = 0; k < n; ++k)  // Floyd–Warshall: the fastest chain of sites
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        d[i * n + j] = std::min(d[i * n + j], d[i * n + k] + d[k * n + j]);
  double bound = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double farthest = 0;
    for (std::size_t j = 0; j < n; ++j) farthest = std::max(farthest, d[j * n + i]);
    bound = std::max(bound, farthest + o.payload_bytes / t.site(i).ingress_bytes_per_s);
  }
  return bound;
}

std::vector<Partition> partitions_without_singletons(std::size_t n) {
  if (n > 12)
    throw std::invalid_argument(fmt::format("exhaustive partitions need n <= 12 (got {})", n));
  std::vector<Partition> out;
  std::vector<int> block_of(n, 0);
  if (n >= 2) enumerate(n, block_of, 1, 1, out);
  return out;
}

EvaluatedSchedule evaluate(const Topology& t, std::string name, Schedule schedule,
                           Transport transport, const PlanOptions& o) {
  EvaluatedSchedule e;
  e.name = std::move(name);
  e.transport = transport;
  e.schedule = std::move(schedule);
  for (const auto& r : e.schedule) {
    e.resolved.push_back(resolve(t, r, transport, o.round));
    e.round_times_s.push_back(round_time(t, e.resolved.back(), o.round));
  }
  e.rho = consensus_rate(e.schedule, t.size());
  e.rounds = rounds_to_consensus(e.schedule, t.size(), o.epsilon, o.max_rounds);
  e.max_clique_size = max_clique(e.schedule);
  e.feasible = std::all_of(e.round_times_s.begin(), e.round_times_s.end(),
                           [](double t) { return std::isfinite(t); });
  e.time_to_consensus_s = kInf;
  if (e.rounds && e.feasible) {
    double time = 0;
    for (std::size_t r = 0; r < *e.rounds; ++r) time += e.round_times_s[r % e.round_times_s.size()];
    e.time_to_consensus_s = time;
  }
  return e;
}

EvaluatedSchedule plan_exhaustive(const Topology& t, const PlanOptions& o) {
  if (!(o.epsilon > 0 && o.epsilon < 1)) {
    throw std::invalid_argument(fmt::format("epsilon must be in (0, 1) (got {})", o.epsilon));
  }
  const std::size_t n = t.size();
  auto parts = partitions_without_singletons(n);
  std::vector<double> tau(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i)
    tau[i] = round_time(t, parts[i], Transport::best, o.round);
  std::vector<std::size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return tau[a] < tau[b]; });
  if (std::isinf(tau[order.front()])) {
    throw std::invalid_argument(
        "FPGA memory too small for any clique: every site needs room for one chunk per inbound "
        "stream");
  }
  // Period 1: only the all-sites clique mixes everything in one round.
  double best = kInf;
  Schedule best_schedule;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].size() == 1 && tau[i] < best) {
      best = tau[i];
      best_schedule = {parts[i]};
    }
  }
  const double log_eps = std::log(o.epsilon);
  for (std::size_t ia = 0; ia < order.size(); ++ia) {
    const auto a = order[ia];
    if (2 * tau[a] >= best) break;
    for (std::size_t ib = ia; ib < order.size(); ++ib) {
      const auto b = order[ib];
      if (tau[a] + tau[b] >= best) break;
      const double rho = pair_rho(parts[a], parts[b], n);
      if (rho >= 1 - 1e-9) continue;
      const double periods = rho < 1e-12 ? 1.0 : std::ceil(log_eps / std::log(rho));
      const double bound = periods * (tau[a] + tau[b]);
      if (bound < best) {
        best = bound;
        best_schedule = {parts[a], parts[b]};
      }
    }
  }
  return evaluate(t, "planned", best_schedule, Transport::best, o);
}

namespace {

// Greedy latency clustering into cliques of at most k sites (the last may be smaller; a singleton
// is merged into the previous clique so every site takes part).
Partition greedy_clusters(const Topology& t, std::size_t k, std::size_t seed) {
  const std::size_t n = t.size();
  std::vector<bool> used(n, false);
  Partition p;
  for (std::size_t step = 0; step < n; ++step) {
    const std::size_t start = (seed + step) % n;
    if (used[start]) continue;
    Clique c{start};
    used[start] = true;
    while (c.size() < k) {
      std::size_t best = n;
      double best_far = kInf;
      for (std::size_t s = 0; s < n; ++s) {
        if (used[s]) continue;
        double far = 0;
        for (auto m : c) far = std::max(far, t.latency_s(m, s));
        if (far < best_far) {
          best_far = far;
          best = s;
        }
      }
      if (best == n) break;
      c.push_back(best);
      used[best] = true;
    }
    p.push_back(std::move(c));
  }
  if (p.size() > 1 && p.back().size() == 1) {
    p[p.size() - 2].push_back(p.back().front());
    p.pop_back();
  }
  return p;
}

// Cliques made of the r-th member of every clique of `p` (rotated by `shift` per clique).
Partition transversal(const Partition& p, std::size_t shift) {
  std::size_t width = 0;
  for (const auto& c : p) width = std::max(width, c.size());
  Partition q(width);
  for (std::size_t ci = 0; ci < p.size(); ++ci) {
    for (std::size_t m = 0; m < p[ci].size(); ++m) q[(m + ci * shift) % width].push_back(p[ci][m]);
  }
  Partition out;
  for (auto& c : q) {
    if (c.size() >= 2)
      out.push_back(std::move(c));
    else if (c.size() == 1 && !out.empty())
      out.back().push_back(c.front());
    else if (c.size() == 1)
      out.push_back(std::move(c));
  }
  return out;
}

double schedule_bound(const Topology& t, const Partition& a, const Partition& b, double log_eps,
                      const PlanOptions& o) {
  const double tau =
      round_time(t, a, Transport::best, o.round) + round_time(t, b, Transport::best, o.round);
  const double rho = pair_rho(a, b, t.size());
  if (rho >= 1 - 1e-9 || std::isinf(tau)) return kInf;
  return (rho < 1e-12 ? 1.0 : std::ceil(log_eps / std::log(rho))) * tau;
}

}  // namespace

EvaluatedSchedule plan_heuristic(const Topology& t, const PlanOptions& o) {
  if (!(o.epsilon > 0 && o.epsilon < 1)) {
    throw std::invalid_argument(fmt::format("epsilon must be in (0, 1) (got {})", o.epsilon));
  }
  const std::size_t n = t.size();
  const double log_eps = std::log(o.epsilon);
  Clique all(n);
  std::iota(all.begin(), all.end(), 0);
  double best = round_time(t, {all}, Transport::best, o.round);
  Schedule best_schedule{{all}};
  for (std::size_t k = 2; k < n; ++k) {
    for (std::size_t seed = 0; seed < std::min<std::size_t>(n, 4); ++seed) {
      Partition a = greedy_clusters(t, k, seed);
      for (std::size_t shift = 0; shift < 3; ++shift) {
        Partition b = transversal(a, shift);
        double bound = schedule_bound(t, a, b, log_eps, o);
        // Local search on the second round: swap two sites of different cliques while it helps.
        for (bool improved = true; improved;) {
          improved = false;
          for (std::size_t x = 0; x < b.size() && !improved; ++x)
            for (std::size_t y = x + 1; y < b.size() && !improved; ++y)
              for (std::size_t i = 0; i < b[x].size() && !improved; ++i)
                for (std::size_t j = 0; j < b[y].size() && !improved; ++j) {
                  std::swap(b[x][i], b[y][j]);
                  const double candidate = schedule_bound(t, a, b, log_eps, o);
                  if (candidate < bound - 1e-12) {
                    bound = candidate;
                    improved = true;
                  } else {
                    std::swap(b[x][i], b[y][j]);
                  }
                }
        }
        if (bound < best) {
          best = bound;
          best_schedule = {a, b};
        }
      }
    }
  }
  return evaluate(t, "planned_heuristic", best_schedule, Transport::best, o);
}

std::optional<std::string> hierarchical_not_applicable(const Topology& t) {
  const Partition by_continent = continents_of(t);
  if (by_continent.size() == 1)
    return "all sites are on one continent (it would be all-to-all unicast, twice)";
  if (by_continent.size() == t.size())
    return "every continent has one site (it would be all-to-all unicast)";
  return std::nullopt;
}

std::vector<EvaluatedSchedule> baselines(const Topology& t, const PlanOptions& o) {
  const std::size_t n = t.size();
  Clique all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<EvaluatedSchedule> out;
  out.push_back(evaluate(t, "all_to_all_unicast", {{all}}, Transport::unicast, o));
  out.push_back(evaluate(t, "all_to_all_multicast_fpga", {{all}}, Transport::multicast_fpga, o));
  // Ring allreduce over the sites in file order: reduce-scatter + allgather, 2(n-1) steps of S/n
  // to the ring successor (cost: ring_allreduce_time); exact average at the end (one "round").
  {
    EvaluatedSchedule e;
    e.name = "ring_allreduce";
    e.transport = Transport::unicast;
    e.schedule = {{all}};
    e.resolved = {{Exchange{ExchangeKind::ring_allreduce, all}}};
    e.round_times_s = {round_time(t, e.resolved[0], o.round)};
    e.rho = 0;
    e.rounds = 1;
    e.time_to_consensus_s = e.round_times_s[0];
    e.max_clique_size = n;
    out.push_back(std::move(e));
  }
  // Hierarchical: sites reduce to their continent's leader (the first site listed), the leaders
  // average (weighted by continent size, exact), the leaders send the result back. Exact after
  // its three rounds; round 3 moves what round 1 moved, in the other direction. (A broadcast is
  // not an averaging round, so this one is evaluated directly rather than by mixing matrices.)
  // A site alone on its continent is its own leader and idles in rounds 1 and 3.
  if (!hierarchical_not_applicable(t)) {
    const Partition by_continent = continents_of(t);
    Clique leaders;
    Partition groups;  // the continents of two or more sites
    for (const auto& c : by_continent) {
      leaders.push_back(c.front());
      if (c.size() >= 2) groups.push_back(c);
    }
    EvaluatedSchedule e;
    e.name = "hierarchical";
    e.transport = Transport::unicast;
    e.schedule = {groups, {leaders}, groups};
    for (const auto& r : e.schedule) {
      e.resolved.push_back(resolve(t, r, Transport::unicast, o.round));
      e.round_times_s.push_back(round_time(t, e.resolved.back(), o.round));
    }
    e.rho = 0;
    e.rounds = 3;
    e.time_to_consensus_s = e.round_times_s[0] + e.round_times_s[1] + e.round_times_s[2];
    e.max_clique_size = max_clique(e.schedule);
    out.push_back(std::move(e));
  }
  return out;
}

PlanOptions plan_options([[maybe_unused]] const Topology& t, const PlanRequest& r) {
  if (!(r.payload_bytes > 0 && std::isfinite(r.payload_bytes))) {
    throw std::invalid_argument(
        fmt::format("payload must be a positive number of bytes (got {})", r.payload_bytes));
  }
  if (!(r.compute_s >= 0 && std::isfinite(r.compute_s))) {
    throw std::invalid_argument(
        fmt::format("compute time must be >= 0 seconds (got {})", r.compute_s));
  }
  if (!(r.epsilon > 0 && r.epsilon < 1))
    throw std::invalid_argument(fmt::format("epsilon must be in (0, 1) (got {})", r.epsilon));
  PlanOptions po;
  po.round.payload_bytes = r.payload_bytes;
  po.round.chunk_bytes = r.chunk_bytes;  // 0: per clique
  po.round.compute_s = r.compute_s;
  po.epsilon = r.epsilon;
  return po;
}

std::uint64_t aggregation_unit(const Topology& t, double payload_bytes, std::uint64_t chunk_bytes) {
  return chunk_bytes > 0 ? chunk_bytes : default_chunk_bytes(t, payload_bytes);
}

EvaluatedSchedule best_plan(const Topology& t, const PlanOptions& o) {
  auto best = t.size() <= kExhaustiveMaxSites ? plan_exhaustive(t, o) : plan_heuristic(t, o);
  best.name = "planned";
  return best;
}

}  // namespace atl::wan
