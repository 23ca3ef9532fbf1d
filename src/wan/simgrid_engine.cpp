// atoll-wan-sim-engine: the SimGrid S4U simulation behind atl::wan::simulate() (simulator.h has
// the platform, the actors and the reasons). Reads a JSON request on stdin, writes the JSON result
// on stdout; errors go to stderr with a non-zero exit status.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <iterator>
#include <memory>
#include <simgrid/s4u.hpp>
#include <sstream>

#include "sim_protocol.h"

namespace sg4 = simgrid::s4u;

namespace atl::wan {
namespace {

// The WAN core between replication points and FPGAs: far above any site link (1 Pbit/s), so only
// site links limit throughput, as in the round model.
constexpr double kCoreBytesPerSecond = 1e15 / 8;

struct Chunk {
  std::size_t source = 0;
  std::size_t index = 0;
  double bytes = 0;
};

struct Platform {
  std::vector<sg4::Host*> site, replication, fpga;
};

// Per-site FPGA accounting for the current round.
struct Buffers {
  std::vector<double> held, peak, memory;
  double overflow = 0;
  void add(std::size_t site, double bytes) {
    held[site] += bytes;
    peak[site] = std::max(peak[site], held[site]);
    overflow = std::max(overflow, held[site] - memory[site]);
  }
};

struct RoundState {
  std::size_t number = 0;
  double end_s = 0;  // time of the last result
  std::uint64_t messages = 0;
  Buffers buffers;
  void finished() { end_s = std::max(end_s, sg4::Engine::get_clock()); }
};

sg4::Mailbox* mailbox(const RoundState& r, const char* role, std::size_t site) {
  return sg4::Mailbox::by_name(fmt::format("r{}-{}-{}", r.number, role, site));
}

// The mailbox of one stream from site `from` to site `to`.
sg4::Mailbox* stream(const RoundState& r, const char* role, std::size_t from, std::size_t to) {
  return sg4::Mailbox::by_name(fmt::format("r{}-{}-{}-{}", r.number, role, from, to));
}

// Creates `code` on `host` as a receiver: `box` delivers to it eagerly (transfers start when sent,
// not when the receiver asks), like a NIC that always accepts.
sg4::ActorPtr receiver(std::vector<sg4::ActorPtr>& actors, const std::string& name, sg4::Host* host,
                       sg4::Mailbox* box, std::function<void()> code) {
  auto actor = sg4::Actor::create(name, host, std::move(code));
  box->set_receiver(actor);
  actors.push_back(actor);
  return actor;
}

std::vector<double> chunk_sizes(double payload, std::uint64_t chunk) {
  const auto c = static_cast<double>(chunk);
  const auto n = static_cast<std::size_t>(std::ceil(payload / c));
  std::vector<double> sizes(n, c);
  sizes.back() = payload - c * static_cast<double>(n - 1);
  return sizes;
}

void start_multicast(const Topology& t, const Platform& p, RoundState& r, const Clique& clique,
                     const SimulationOptions& o, std::vector<sg4::ActorPtr>& actors) {
  const std::size_t k = clique.size();
  double line_rate = std::numeric_limits<double>::infinity();
  for (auto m : clique)
    line_rate = std::min({line_rate, t.site(m).egress_bytes_per_s, t.site(m).ingress_bytes_per_s});
  // The throttling rule and the senders' staggered starts (round_model.h), set when the clique
  // starts.
  const CliqueCost cost = clique_cost(t, clique, Transport::multicast_fpga, o.round);
  const double rate = o.throttle ? cost.rate_bytes_per_s : line_rate;
  if (!(rate > 0) || !std::isfinite(rate)) {
    throw SimulationError(fmt::format(
        "round {}: a multicast clique of {} sites cannot run: some member's FPGA memory is below "
        "one chunk per inbound stream",
        r.number + 1, k));
  }
  // The clique's aggregation unit: pinned, or the model's per-clique choice (round_model.h).
  const double chunk = static_cast<double>(cost.chunk_bytes);
  const auto sizes =
      std::make_shared<std::vector<double>>(chunk_sizes(o.round.payload_bytes, cost.chunk_bytes));
  for (std::size_t member = 0; member < k; ++member) {
    const std::size_t s = clique[member];
    const double offset = cost.start_offset_s.empty() ? 0.0 : cost.start_offset_s[member];
    auto* egress = mailbox(r, "egress", s);
    // Replication point: one copy in over the egress link, k-1 copies out to the FPGAs.
    receiver(actors, "replicate", p.replication[s], egress, [=, &r] {
      std::vector<sg4::CommPtr> sends;
      for (std::size_t j = 0; j < sizes->size(); ++j) {
        auto in = egress->get_unique<Chunk>();
        for (auto d : clique) {
          if (d == s) continue;
          sends.push_back(stream(r, "fpga", s, d)->put_async(new Chunk(*in), in->bytes));
          ++r.messages;
        }
      }
      sg4::Comm::wait_all(sends);
    });
    actors.push_back(sg4::Actor::create("send", p.site[s], [=, &r] {
      const double start = sg4::Engine::get_clock() + offset;
      for (std::size_t j = 0; j < sizes->size(); ++j) {
        sg4::this_actor::sleep_until(start + static_cast<double>(j) * chunk / rate);
        egress->put(new Chunk{s, j, (*sizes)[j]}, (*sizes)[j]);
        ++r.messages;
      }
    }));
  }
  for (auto d : clique) {
    // FPGA at d's edge: holds chunks until every source's chunk j is in, then forwards the sum.
    // One receiver per inbound stream, so a chunk is counted when it arrives (a shared mailbox
    // would hand chunks over in the order they were sent, not received).
    struct Aggregation {
      std::vector<std::size_t> arrived;
      std::vector<std::size_t> ready;  // chunk indices complete, in completion order
      std::size_t next = 0;
      sg4::SemaphorePtr available = sg4::Semaphore::create(0);
    };
    auto agg = std::make_shared<Aggregation>();
    agg->arrived.assign(sizes->size(), 0);
    for (auto s : clique) {
      if (s == d) continue;
      auto* inbound = stream(r, "fpga", s, d);
      receiver(actors, "fpga-in", p.fpga[d], inbound, [=, &r] {
        for (std::size_t n = 0; n < sizes->size(); ++n) {
          auto in = inbound->get_unique<Chunk>();
          r.buffers.add(d, in->bytes);
          if (++agg->arrived[in->index] == k - 1) {
            agg->ready.push_back(in->index);
            agg->available->release();
          }
        }
      });
    }
    auto* deliver = mailbox(r, "site", d);
    actors.push_back(sg4::Actor::create("fpga-out", p.fpga[d], [=, &r] {
      for (std::size_t n = 0; n < sizes->size(); ++n) {
        agg->available->acquire();
        const std::size_t j = agg->ready[agg->next++];
        deliver->put(new Chunk{d, j, (*sizes)[j]}, (*sizes)[j]);
        ++r.messages;
        r.buffers.add(d, -static_cast<double>(k - 1) * (*sizes)[j]);
      }
    }));
    receiver(actors, "deliver", p.site[d], deliver, [=, &r] {
      for (std::size_t n = 0; n < sizes->size(); ++n) deliver->get_unique<Chunk>();
      r.finished();
    });
  }
}

// Unicast as store-and-forward chunk streams: the sender interleaves its k-1 streams chunk by
// chunk on its egress link (fair share), the WAN carries each chunk with the pair's latency, and
// the receiver's ingress forwards chunks in arrival order (a FIFO queue at the bottleneck). This
// is what TCP-fair flows do; SimGrid's flow-level transfers put the whole latency before the
// bytes, so a near flow would take the shared link first and the clique would finish early
// (docs/wan.md has both figures; `flow_level_unicast` selects the flow-level variant).
void start_unicast(const Platform& p, RoundState& r, const Clique& clique,
                   const SimulationOptions& o, std::vector<sg4::ActorPtr>& actors) {
  const std::size_t k = clique.size();
  if (o.flow_level_unicast) {
    const double bytes = o.round.payload_bytes;
    for (auto d : clique) {
      auto* box = mailbox(r, "unicast", d);
      receiver(actors, "unicast-in", p.site[d], box, [=, &r] {
        for (std::size_t n = 0; n + 1 < k; ++n) box->get_unique<Chunk>();
        r.finished();
      });
    }
    for (auto s : clique) {
      actors.push_back(sg4::Actor::create("unicast-out", p.site[s], [=, &r] {
        std::vector<sg4::CommPtr> sends;
        for (auto d : clique) {
          if (d == s) continue;
          sends.push_back(mailbox(r, "unicast", d)->put_async(new Chunk{s, d, bytes}, bytes));
          ++r.messages;
        }
        sg4::Comm::wait_all(sends);
      }));
    }
    return;
  }
  const auto sizes = std::make_shared<std::vector<double>>(
      chunk_sizes(o.round.payload_bytes, o.unicast_segment_bytes));
  for (auto d : clique) {
    // The ingress link's queue: chunks in arrival order (one receiver per inbound stream).
    struct Queue {
      std::vector<Chunk> chunks;
      std::size_t next = 0;
      sg4::SemaphorePtr available = sg4::Semaphore::create(0);
    };
    auto queue = std::make_shared<Queue>();
    for (auto s : clique) {
      if (s == d) continue;
      auto* pass = stream(r, "unicast-pass", s, d);
      receiver(actors, "unicast-wan-in", p.fpga[d], pass, [=] {
        for (std::size_t n = 0; n < sizes->size(); ++n) {
          queue->chunks.push_back(*pass->get_unique<Chunk>());
          queue->available->release();
        }
      });
    }
    auto* deliver = mailbox(r, "unicast", d);
    actors.push_back(sg4::Actor::create("unicast-ingress", p.fpga[d], [=, &r] {
      for (std::size_t n = 0; n < (k - 1) * sizes->size(); ++n) {
        queue->available->acquire();
        const Chunk c = queue->chunks[queue->next++];
        deliver->put(new Chunk(c), c.bytes);
        ++r.messages;
      }
    }));
    receiver(actors, "unicast-in", p.site[d], deliver, [=, &r] {
      for (std::size_t n = 0; n < (k - 1) * sizes->size(); ++n) deliver->get_unique<Chunk>();
      r.finished();
    });
  }
  for (auto s : clique) {
    auto* egress = mailbox(r, "unicast-egress", s);
    receiver(actors, "unicast-wan", p.replication[s], egress, [=, &r] {
      std::vector<sg4::CommPtr> sends;
      for (std::size_t n = 0; n < (k - 1) * sizes->size(); ++n) {
        auto in = egress->get_unique<Chunk>();
        // Chunk::source carries the destination on this leg.
        sends.push_back(
            stream(r, "unicast-pass", s, in->source)->put_async(new Chunk(*in), in->bytes));
        ++r.messages;
      }
      sg4::Comm::wait_all(sends);
    });
    actors.push_back(sg4::Actor::create("unicast-out", p.site[s], [=, &r] {
      for (std::size_t j = 0; j < sizes->size(); ++j) {
        for (auto d : clique) {
          if (d == s) continue;
          egress->put(new Chunk{d, j, (*sizes)[j]}, (*sizes)[j]);
          ++r.messages;
        }
      }
    }));
  }
}

void start_ring(const Platform& p, RoundState& r, const Clique& ring, const SimulationOptions& o,
                std::vector<sg4::ActorPtr>& actors) {
  const std::size_t k = ring.size(), steps = 2 * (k - 1);
  const double bytes = o.round.payload_bytes / static_cast<double>(k);
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t me = ring[i], next = ring[(i + 1) % k];
    auto* box = mailbox(r, "ring", me);
    receiver(actors, "ring", p.site[me], box, [=, &r] {
      std::vector<sg4::CommPtr> sends;
      for (std::size_t step = 0; step < steps; ++step) {
        sends.push_back(mailbox(r, "ring", next)->put_async(new Chunk{me, step, bytes}, bytes));
        ++r.messages;
        box->get_unique<Chunk>();  // the predecessor's step: needed before the next send
      }
      r.finished();
      sg4::Comm::wait_all(sends);
    });
  }
}

Platform build_platform(const Topology& t) {
  auto* zone = sg4::create_full_zone("wan");
  Platform p;
  std::vector<sg4::Link*> egress, ingress;
  const std::size_t n = t.size();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& s = t.site(i);
    p.site.push_back(zone->create_host(s.code, 1e9));
    p.replication.push_back(zone->create_host(s.code + "-replication", 1e9));
    p.fpga.push_back(zone->create_host(s.code + "-fpga", 1e9));
    egress.push_back(zone->create_link(s.code + "-egress", s.egress_bytes_per_s)->seal());
    ingress.push_back(zone->create_link(s.code + "-ingress", s.ingress_bytes_per_s)->seal());
  }
  auto route = [&](sg4::Host* a, sg4::Host* b, std::vector<sg4::Link*> links) {
    std::vector<sg4::LinkInRoute> in;
    for (auto* l : links) in.emplace_back(l);
    zone->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, in, false);
  };
  for (std::size_t i = 0; i < n; ++i) {
    route(p.site[i], p.replication[i], {egress[i]});
    route(p.fpga[i], p.site[i], {ingress[i]});
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      auto* core = zone->create_link(fmt::format("{}-{}", t.site(i).code, t.site(j).code),
                                     kCoreBytesPerSecond);
      core->set_latency(t.latency_s(i, j));
      core->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
      core->seal();
      route(p.replication[i], p.fpga[j], {core});
      route(p.site[i], p.site[j], {egress[i], core, ingress[j]});
    }
  }
  zone->seal();
  return p;
}

}  // namespace

namespace sim_protocol {

SimulationResult simulate_in_process(const Topology& t, const std::vector<ResolvedRound>& period,
                                     const SimulationOptions& o) {
  const auto wall_start = std::chrono::steady_clock::now();
  // Faithful alpha-beta transfers over a long fat pipe (docs/wan.md, "Simulator"): CM02 has no
  // latency or bandwidth factors; TCP-gamma 0 lifts the window cap (rate <= gamma / 2ℓ) that
  // would hold a 70 ms link to ~30 MB/s; no ACK cross-traffic on the reverse path.
  std::vector<std::string> args{"atoll-wan-sim-engine",      "--cfg=network/model:CM02",
                                "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0",
                                "--log=root.thresh:warning", "--log=xbt_cfg.thresh:warning"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  sg4::Engine engine(&argc, argv.data());
  const Platform p = build_platform(t);

  SimulationResult result;
  std::string failure;
  sg4::Actor::create("schedule", p.site[0], [&] {
    try {
      for (std::size_t number = 0; number < o.rounds; ++number) {
        RoundState r;
        r.number = number;
        r.buffers.held.assign(t.size(), 0);
        r.buffers.peak.assign(t.size(), 0);
        for (const auto& s : t.sites())
          r.buffers.memory.push_back(static_cast<double>(s.fpga_memory_bytes));
        const double start = sg4::Engine::get_clock();
        r.end_s = start;
        std::vector<sg4::ActorPtr> actors;
        for (const auto& e : period[number % period.size()]) {
          switch (e.kind) {
            case ExchangeKind::multicast_fpga:
              start_multicast(t, p, r, e.sites, o, actors);
              break;
            case ExchangeKind::unicast:
              start_unicast(p, r, e.sites, o, actors);
              break;
            case ExchangeKind::ring_allreduce:
              start_ring(p, r, e.sites, o, actors);
              break;
          }
        }
        for (auto& a : actors) a->join();
        SimulatedRound out;
        out.time_s = r.end_s - start + o.round.compute_s;
        out.peak_buffer_bytes = r.buffers.peak;
        out.overflow_bytes = std::max(0.0, r.buffers.overflow);
        result.rounds.push_back(out);
        result.messages += r.messages;
        if (o.round.compute_s > 0) sg4::this_actor::sleep_for(o.round.compute_s);
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  engine.run();
  if (!failure.empty()) throw SimulationError(failure);
  for (const auto& r : result.rounds) result.total_time_s += r.time_s;
  result.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace sim_protocol
}  // namespace atl::wan

int main() {
  try {
    const std::string text{std::istreambuf_iterator<char>(std::cin),
                           std::istreambuf_iterator<char>()};
    const auto request = atl::wan::sim_protocol::request_from_json(nlohmann::json::parse(text));
    const auto result = atl::wan::sim_protocol::simulate_in_process(
        request.topology, request.period, request.options);
    std::cout << atl::wan::sim_protocol::result_to_json(result).dump() << "\n";
    std::cout.flush();
    // Skip SimGrid's teardown: the result is out, and the process ends here.
    std::_Exit(std::cout ? 0 : 1);
  } catch (const std::exception& e) {
    std::cerr << "atoll-wan-sim-engine: error: " << e.what() << "\n";
    return 1;
  }
}
