#include "atoll/wan/round_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

namespace atl::wan {

CliqueCost clique_cost(const Topology& t, const Clique& clique, Transport transport,
                       const RoundOptions& o) {
  if (transport == Transport::best) {
    const auto u = clique_cost(t, clique, Transport::unicast, o);
    const auto m = clique_cost(t, clique, Transport::multicast_fpga, o);
    return m.time_s <= u.time_s ? m : u;
  }
  CliqueCost cost;
  const std::size_t k = clique.size();
  if (k < 2) return cost;  // an idle site
  double max_latency = 0;
  for (auto s : clique)
    for (auto r : clique)
      if (s != r) max_latency = std::max(max_latency, t.latency_s(s, r));
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
    return cost;
  }
  double rate = std::numeric_limits<double>::infinity();
  for (auto m : clique) {
    rate = std::min({rate, t.site(m).egress_bytes_per_s, t.site(m).ingress_bytes_per_s});
  }
  const double line_rate = rate;
  const double fixed = static_cast<double>(k - 1) * static_cast<double>(o.chunk_bytes);
  for (auto r : clique) {
    double latest = 0;
    for (auto s : clique)
      if (s != r) latest = std::max(latest, t.latency_s(s, r));
    std::vector<double> skews;
    for (auto s : clique)
      if (s != r) skews.push_back(latest - t.latency_s(s, r));
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
    if (memory < fixed) {
      cost.feasible = false;
      cost.time_s = std::numeric_limits<double>::infinity();
      return cost;
    }
    if (buffer(rate) > memory) {  // largest R with B_r(R) <= M_r (B_r is increasing in R)
      double lo = 0, hi = rate;
      for (int it = 0; it < 200 && hi - lo > 1e-9 * hi; ++it) {
        const double mid = 0.5 * (lo + hi);
        (buffer(mid) <= memory ? lo : hi) = mid;
      }
      rate = lo;
    }
  }
  if (!(rate > 0)) {
    cost.feasible = false;
    cost.time_s = std::numeric_limits<double>::infinity();
    return cost;
  }
  cost.throttled = rate < line_rate;
  cost.rate_bytes_per_s = rate;
  cost.time_s = max_latency + o.payload_bytes / rate;
  return cost;
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
      const auto u = clique_cost(t, clique, Transport::unicast, o);
      const auto m = clique_cost(t, clique, Transport::multicast_fpga, o);
      e.kind = m.time_s <= u.time_s ? ExchangeKind::multicast_fpga : ExchangeKind::unicast;
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
