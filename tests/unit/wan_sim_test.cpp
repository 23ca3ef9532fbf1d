// The SimGrid simulator against hand-computed times, the FPGA buffer bound with and without the
// throttle, and the schedule file format.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "atoll/wan/planner.h"
#include "atoll/wan/round_model.h"
#include "atoll/wan/schedule_file.h"
#include "atoll/wan/simulator.h"
#include "atoll/wan/smpi_platform.h"
#include "atoll/wan/topology.h"

namespace {
using namespace atl::wan;

// Sites on a line, 1 GB/s links, latencies from a measured matrix (seconds).
Topology line(std::vector<double> latency, std::uint64_t fpga_memory) {
  std::vector<Site> sites;
  const std::size_t n = latency.size() == 4 ? 2 : 3;
  for (std::size_t i = 0; i < n; ++i) {
    Site s;
    s.code = std::string(1, static_cast<char>('A' + i));
    s.name = s.code;
    s.continent = "X";
    s.egress_bytes_per_s = s.ingress_bytes_per_s = 1e9;
    s.fpga_memory_bytes = fpga_memory;
    sites.push_back(s);
  }
  Topology t(sites);
  t.set_latency_matrix(latency);
  return t;
}

Topology three(std::uint64_t memory) {  // A-B 10 ms, B-C 20 ms, A-C 30 ms
  return line({0, 0.010, 0.030, 0.010, 0, 0.020, 0.030, 0.020, 0}, memory);
}

SimulationOptions options(double payload, std::uint64_t chunk) {
  SimulationOptions o;
  o.round.payload_bytes = payload;
  o.round.chunk_bytes = chunk;
  o.unicast_segment_bytes = chunk;
  return o;
}

TEST(Simulator, OneTransferOverOneLink) {
  const auto t = line({0, 0.025, 0.025, 0}, 1 << 30);
  auto o = options(1e8, 1'000'000);
  // A flow alone: latency + size / bandwidth, exactly (CM02, no TCP window, no factors).
  o.flow_level_unicast = true;
  const std::vector<ResolvedRound> one_way{{Exchange{ExchangeKind::unicast, {0, 1}}}};
  EXPECT_NEAR(simulate(t, one_way, o).rounds.at(0).time_s, 0.025 + 0.1, 1e-6);
  // Store-and-forward chunks: the egress sends for S/E, the last chunk crosses the WAN (25 ms)
  // and then the ingress link (1 ms for 1 MB).
  o.flow_level_unicast = false;
  EXPECT_NEAR(simulate(t, one_way, o).rounds.at(0).time_s, 0.1 + 0.025 + 0.001, 1e-6);
  // Multicast to one peer: the same path, the same time; a pair has no skew: the FPGA holds the
  // chunk crossing the ingress link and the next one, arriving meanwhile at line rate.
  const std::vector<ResolvedRound> mc{{Exchange{ExchangeKind::multicast_fpga, {0, 1}}}};
  const auto r = simulate(t, mc, o).rounds.at(0);
  EXPECT_NEAR(r.time_s, 0.1 + 0.025 + 0.001, 1e-6);
  EXPECT_NEAR(r.peak_buffer_bytes[1], 2e6, 1.0);
  EXPECT_NEAR(clique_cost(t, {0, 1}, Transport::multicast_fpga, o.round).buffer_bytes, 2e6, 1.0);
}

TEST(Simulator, ThreeSiteCliqueMatchesHandComputedTimes) {
  const auto t = three(std::uint64_t{1} << 30);
  const auto o = options(1e8, 1'000'000);
  // Multicast: S/R on the egress, then the farthest latency (30 ms), then one chunk on ingress.
  const std::vector<ResolvedRound> mc{{Exchange{ExchangeKind::multicast_fpga, {0, 1, 2}}}};
  const auto r = simulate(t, mc, o).rounds.at(0);
  EXPECT_NEAR(r.time_s, 0.1 + 0.030 + 0.001, 1e-6);
  // Receiver A hears B 20 ms before C: 20 MB of B's chunks wait, plus two chunks per stream.
  EXPECT_NEAR(r.peak_buffer_bytes[0], 20e6 + 4e6, 1.0);
  const auto model = clique_cost(t, {0, 1, 2}, Transport::multicast_fpga, o.round);
  EXPECT_NEAR(model.buffer_bytes, 20e6 + 4e6, 1.0);
  EXPECT_NEAR(r.time_s / model.time_s, 1.0, 0.01);
  // Unicast full mesh: 2 copies on every link (0.2 s), the farthest pair 30 ms, one chunk.
  const std::vector<ResolvedRound> uc{{Exchange{ExchangeKind::unicast, {0, 1, 2}}}};
  EXPECT_NEAR(simulate(t, uc, o).rounds.at(0).time_s, 0.2 + 0.030 + 0.001, 2e-3);
  // Ring A->B->C->A, 4 steps of S/3: the longest chain of 4 hops is C->A, A->B, B->C, C->A
  // = 30 + 10 + 20 + 30 = 90 ms, plus 4 · 10 ms on the wire.
  auto ro = options(3e7, 1'000'000);
  const std::vector<ResolvedRound> ring{{Exchange{ExchangeKind::ring_allreduce, {0, 1, 2}}}};
  EXPECT_NEAR(simulate(t, ring, ro).rounds.at(0).time_s, 0.090 + 0.040, 1e-6);
  EXPECT_NEAR(ring_allreduce_time(t, {0, 1, 2}, ro.round), 0.090 + 0.040, 1e-12);
}

TEST(Simulator, ThrottleKeepsTheBufferWithinTheMemory) {
  // 3 MB per FPGA: unstaggered, A needs 20 MB of skew buffer at line rate; staggered to zero
  // skew (δ = 10, 20, 0 ms) still 2 streams × 2 chunks = 4 MB: the clique runs staggered and
  // throttled.
  const auto t = three(3'000'000);
  auto o = options(1e8, 1'000'000);
  const std::vector<ResolvedRound> mc{{Exchange{ExchangeKind::multicast_fpga, {0, 1, 2}}}};
  const auto throttled = simulate(t, mc, o).rounds.at(0);
  EXPECT_LE(throttled.peak_buffer_bytes[0], 3e6);
  EXPECT_EQ(throttled.overflow_bytes, 0.0);
  const auto model = clique_cost(t, {0, 1, 2}, Transport::multicast_fpga, o.round);
  ASSERT_TRUE(model.throttled);
  EXPECT_NEAR(throttled.time_s / model.time_s, 1.0, 0.02);
  ASSERT_EQ(model.start_offset_s.size(), 3u);
  EXPECT_NEAR(model.start_offset_s[0], 0.010, 1e-9);
  EXPECT_NEAR(model.start_offset_s[1], 0.020, 1e-9);
  EXPECT_NEAR(model.start_offset_s[2], 0.0, 1e-9);
  // Without the throttle the same clique overflows the memory (4 MB of chunk slots).
  o.throttle = false;
  const auto unthrottled = simulate(t, mc, o).rounds.at(0);
  EXPECT_GT(unthrottled.overflow_bytes, 0.5e6);
}

TEST(Simulator, StaggeredTriadArrivesAligned) {
  // 500 kB per FPGA, 100 kB chunks: unstaggered the triad needs 20 MB at A; staggered
  // (δ = 10, 20, 0 ms) every receiver gets its two streams together, so it holds only the chunk
  // slots (400 kB) and runs at line rate: 40 ms + S/R = 50 ms (+ one chunk on the ingress).
  const auto t = three(500'000);
  const auto o = options(1e7, 100'000);
  const auto model = clique_cost(t, {0, 1, 2}, Transport::multicast_fpga, o.round);
  ASSERT_FALSE(model.throttled);
  EXPECT_NEAR(model.time_s, 0.050, 1e-9);
  const std::vector<ResolvedRound> mc{{Exchange{ExchangeKind::multicast_fpga, {0, 1, 2}}}};
  const auto r = simulate(t, mc, o).rounds.at(0);
  EXPECT_NEAR(r.time_s, 0.050 + 0.0001, 1e-6);
  for (double b : r.peak_buffer_bytes) EXPECT_LE(b, 400'000 + 1.0);
  EXPECT_EQ(r.overflow_bytes, 0.0);
}

TEST(Simulator, RoundsRunBackToBackAndCycleThePeriod) {
  const auto t = three(std::uint64_t{1} << 30);
  auto o = options(1e7, 1'000'000);
  o.rounds = 3;
  o.round.compute_s = 0.5;
  const std::vector<ResolvedRound> period{{Exchange{ExchangeKind::unicast, {0, 1}}},
                                          {Exchange{ExchangeKind::unicast, {1, 2}}}};
  const auto r = simulate(t, period, o);
  ASSERT_EQ(r.rounds.size(), 3u);
  EXPECT_NEAR(r.rounds[0].time_s, 0.5 + 0.010 + 0.010 + 0.001, 1e-6);
  EXPECT_NEAR(r.rounds[1].time_s, 0.5 + 0.020 + 0.010 + 0.001, 1e-6);
  EXPECT_NEAR(r.rounds[2].time_s, r.rounds[0].time_s, 1e-9);
  EXPECT_NEAR(r.total_time_s, r.rounds[0].time_s * 2 + r.rounds[1].time_s, 1e-9);
}

TEST(Simulator, BadInput) {
  const auto t = three(500);  // below one chunk
  const auto o = options(1e8, 1'000'000);
  EXPECT_THROW(simulate(t, {{Exchange{ExchangeKind::multicast_fpga, {0, 1}}}}, o),
               std::invalid_argument);
  EXPECT_THROW(
      simulate(t,
               {{Exchange{ExchangeKind::unicast, {0, 1}}, Exchange{ExchangeKind::unicast, {1, 2}}}},
               o),
      std::invalid_argument);  // site 1 twice in a round
  EXPECT_THROW(simulate(t, {{Exchange{ExchangeKind::unicast, {0, 7}}}}, o), std::invalid_argument);
  EXPECT_THROW(simulate(t, {}, o), std::invalid_argument);
  auto bad = o;
  bad.engine_path = "/nonexistent/engine";
  EXPECT_THROW(simulate(t, {{Exchange{ExchangeKind::unicast, {0, 1}}}}, bad), SimulationError);
}

TEST(ScheduleFile, RoundTripsThroughAFile) {
  ScheduleFile s;
  s.name = "planned";
  s.site_codes = {"TYO", "LON", "NYC", "SIN"};
  s.payload_bytes = 123456789.5;
  s.rounds_to_consensus = 2;
  s.rounds = {
      {Exchange{ExchangeKind::multicast_fpga, {0, 3}}, Exchange{ExchangeKind::unicast, {1, 2}}},
      {Exchange{ExchangeKind::ring_allreduce, {2, 0, 1}}}};
  const auto file = std::filesystem::temp_directory_path() / "atoll-schedule-test.txt";
  write_schedule_file(file, s);
  const auto back = read_schedule_file(file);
  EXPECT_EQ(back.name, s.name);
  EXPECT_EQ(back.site_codes, s.site_codes);
  EXPECT_EQ(back.payload_bytes, s.payload_bytes);
  EXPECT_EQ(back.rounds_to_consensus, s.rounds_to_consensus);
  ASSERT_EQ(back.rounds.size(), 2u);
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(back.rounds[r].size(), s.rounds[r].size());
    for (std::size_t g = 0; g < s.rounds[r].size(); ++g) {
      EXPECT_EQ(back.rounds[r][g].kind, s.rounds[r][g].kind);
      EXPECT_EQ(back.rounds[r][g].sites, s.rounds[r][g].sites);
    }
  }
  EXPECT_EQ(format_schedule(back), format_schedule(s));
  std::filesystem::remove(file);
  // Mapped onto a topology whose sites are in another order.
  std::vector<Site> sites;
  for (std::string c : {"SIN", "NYC", "LON", "TYO", "AMS"}) {
    Site x;
    x.code = x.name = c;
    x.egress_bytes_per_s = x.ingress_bytes_per_s = 1e9;
    sites.push_back(x);
  }
  const Topology t(sites);
  const auto on = rounds_on(s, t);
  EXPECT_EQ(on[0][0].sites, (Clique{3, 0}));
  EXPECT_EQ(on[1][0].sites, (Clique{1, 3, 2}));
}

void expect_error(const std::string& text, const std::string& message) {
  try {
    parse_schedule(text, "s.txt");
    ADD_FAILURE() << "no error for: " << text;
  } catch (const ScheduleFileError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(ScheduleFile, BadInputNamesTheProblem) {
  const std::string head = "atoll-wan-schedule 1\nsites A B C\npayload_bytes 1e6\n";
  expect_error("hello\n", "expected 'atoll-wan-schedule 1'");
  expect_error("atoll-wan-schedule 7\n", "unsupported format version '7'");
  expect_error(head + "round\nclique unicast A PAR\n", "s.txt:5: unknown site 'PAR'");
  expect_error(head + "round\nclique unicast A B\nclique multicast_fpga B C\n",
               "site 'B' is in two groups of round 1");
  expect_error(head + "round\nclique broadcast A B\n", "unknown clique kind 'broadcast'");
  expect_error(head + "round\nclique unicast A\n", "at least two sites");
  expect_error(head, "no 'round'");
  expect_error("atoll-wan-schedule 1\nsites A B\nround\nclique unicast A B\n",
               "no 'payload_bytes'");
  expect_error(head + "payload_bytes -5\n", "payload_bytes must be positive");
  expect_error(head + "round\nround\nclique unicast A B\n", "round 1 has no group");
  // A code the topology lacks.
  const auto s = parse_schedule(head + "round\nclique unicast A C\n");
  std::vector<Site> sites;
  for (std::string c : {"A", "B"}) {
    Site x;
    x.code = x.name = c;
    x.egress_bytes_per_s = x.ingress_bytes_per_s = 1e9;
    sites.push_back(x);
  }
  EXPECT_THROW(rounds_on(s, Topology(sites)), ScheduleFileError);
  EXPECT_THROW(read_schedule_file("/nonexistent/schedule.txt"), ScheduleFileError);
}

// The planner's schedules on the nine cities, simulated: within 10% of the model (the check that
// `atoll wan-sim --from-plan` makes at every memory size, here at one small and one large).
TEST(Simulator, PlannerSchedulesAgreeWithTheModelOnNineCities) {
  for (std::uint64_t memory : {std::uint64_t{64'000'000}, std::uint64_t{4'000'000'000}}) {
    SiteDefaults d;
    d.fpga_memory_bytes = memory;
    const auto t =
        load_topology_csv(std::filesystem::path(ATOLL_SOURCE_DIR) / "data/cities-9.csv", d);
    PlanOptions po;
    po.round.payload_bytes = 1e8;
    // One pinned unit keeps this test fast (the throttled all-to-all multicast would otherwise
    // run ~3,000 chunks per stream); the per-clique unit is checked in the test below.
    po.round.chunk_bytes = 1 << 20;
    auto all = baselines(t, po);
    all.insert(all.begin(), plan_exhaustive(t, po));
    for (const auto& e : all) {
      if (!std::isfinite(e.time_to_consensus_s)) continue;  // infeasible multicast baseline
      SimulationOptions o;
      o.round = po.round;
      o.rounds = *e.rounds;
      const auto sim = simulate(t, e.resolved, o);
      for (std::size_t r = 0; r < o.rounds; ++r) {
        EXPECT_NEAR(sim.rounds[r].time_s / e.round_times_s[r % e.round_times_s.size()], 1.0, 0.1)
            << e.name << " round " << r + 1 << " memory " << memory;
        EXPECT_EQ(sim.rounds[r].overflow_bytes, 0.0) << e.name;
      }
    }
  }
}

// The simulator runs each multicast clique at the unit the model chose for it (chunk_bytes 0).
TEST(Simulator, PerCliqueAggregationUnitAgreesWithTheModel) {
  // 150 kB per FPGA, 10 MB payload: unstaggered, A holds R · 20 ms of skew; at 1 MiB the triad
  // cannot run (2 slots > memory), at the smallest unit (4 KiB) it runs staggered.
  const auto t = three(150'000);
  auto o = options(1e7, 0);
  o.unicast_segment_bytes = 1 << 20;
  const auto model = clique_cost(t, {0, 1, 2}, Transport::multicast_fpga, o.round);
  ASSERT_TRUE(model.feasible);
  auto pinned = o.round;
  pinned.chunk_bytes = 1 << 20;
  EXPECT_FALSE(clique_cost(t, {0, 1, 2}, Transport::multicast_fpga, pinned).feasible);
  EXPECT_LT(model.chunk_bytes, std::uint64_t{1} << 20);
  const std::vector<ResolvedRound> mc{{Exchange{ExchangeKind::multicast_fpga, {0, 1, 2}}}};
  const auto r = simulate(t, mc, o).rounds.at(0);
  EXPECT_NEAR(r.time_s / model.time_s, 1.0, 0.02);
  for (double b : r.peak_buffer_bytes) EXPECT_LE(b, 150'000 + 1.0);
  EXPECT_EQ(r.overflow_bytes, 0.0);
}

TEST(ScheduleFile, ToScheduleFileCarriesThePlannedSchedule) {
  const auto t = load_topology({.fpga_memory_bytes = 8e6});
  const auto po = plan_options(t, {.payload_bytes = 1e7});
  const auto best = best_plan(t, po);
  const auto f = to_schedule_file(t, best, 1e7);
  EXPECT_EQ(f.name, "planned");
  ASSERT_EQ(f.site_codes.size(), 9u);
  EXPECT_EQ(f.site_codes.front(), "TYO");
  EXPECT_DOUBLE_EQ(f.payload_bytes, 1e7);
  EXPECT_EQ(f.rounds_to_consensus, best.rounds);
  const auto back = parse_schedule(format_schedule(f));
  const auto rounds = rounds_on(back, t);
  ASSERT_EQ(rounds.size(), best.resolved.size());
  for (std::size_t r = 0; r < best.resolved.size(); ++r) {
    const auto& got = rounds[r];
    ASSERT_EQ(got.size(), best.resolved[r].size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].kind, best.resolved[r][k].kind);
      EXPECT_EQ(got[k].sites, best.resolved[r][k].sites);
    }
  }
}

// The SMPI platform across WAN sites (smpi_platform.h): one host per site, one access link per
// site, one latency link per pair carrying the topology's latency, a route for every pair.
TEST(SmpiPlatform, EightSitesTwentyEightPairLinksWithTheTopologysLatencies) {
  const auto all = load_topology({});
  std::vector<std::string> codes;
  for (std::size_t i = 0; i < 8; ++i) codes.push_back(all.site(i).code);
  const auto t = select_sites(all, codes);
  SmpiPlatformOptions o;
  o.name = "wan-test";
  o.access_bits_per_s = 1e9;
  o.smpi_cfg = "smpi/allreduce:ring";
  const auto xml = smpi_platform_xml(t, o);
  EXPECT_NE(xml.find("<zone id=\"wan-test\" routing=\"Full\">"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<prop id=\"atoll_smpi_cfg\" value=\"smpi/allreduce:ring\"/>"),
            std::string::npos);
  const std::regex host("<host id=\"([A-Z]+)\" speed=\"1Gf\"/>");
  std::vector<std::string> hosts;
  for (std::sregex_iterator i(xml.begin(), xml.end(), host), end; i != end; ++i)
    hosts.push_back((*i)[1]);
  EXPECT_EQ(hosts, codes);  // site order: rank i runs at site i
  const std::regex access(
      "<link id=\"([A-Z]+)-access\" bandwidth=\"1Gbps\" latency=\"0us\" "
      "sharing_policy=\"SPLITDUPLEX\"/>");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(xml.begin(), xml.end(), access), std::sregex_iterator()),
      8);
  const std::regex pair(
      "<link id=\"([A-Z]+)-([A-Z]+)\" bandwidth=\"1Pbps\" "
      "latency=\"([0-9.]+)ms\" sharing_policy=\"FATPIPE\"/>");
  std::size_t pairs = 0;
  for (std::sregex_iterator i(xml.begin(), xml.end(), pair), end; i != end; ++i, ++pairs) {
    const auto a = t.index_of((*i)[1]), b = t.index_of((*i)[2]);
    EXPECT_LT(a, b);
    EXPECT_NEAR(std::stod((*i)[3]) * 1e-3, t.latency_s(a, b), 1e-9) << (*i)[0];
  }
  EXPECT_EQ(pairs, 28u);
  const std::regex route(
      "<route src=\"([A-Z]+)\" dst=\"([A-Z]+)\" symmetrical=\"YES\"><link_ctn "
      "id=\"\\1-access\" direction=\"UP\"/><link_ctn id=\"\\1-\\2\"/><link_ctn "
      "id=\"\\2-access\" direction=\"DOWN\"/></route>");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(xml.begin(), xml.end(), route), std::sregex_iterator()),
      28);
}

// The committed platform (scripts/make-wan-platform wan-8x1g 8 1Gbps) still matches the topology
// model: eight hosts in site order, 28 pair links with the planner's latencies (to the 1 ns the
// file keeps), the chosen collectives. Regenerate it when the model or the choice changes.
TEST(SmpiPlatform, CommittedWan8x1gMatchesTheTopology) {
  std::ifstream in(std::filesystem::path(ATOLL_SOURCE_DIR) / "platforms/wan-8x1g.xml");
  ASSERT_TRUE(in) << "platforms/wan-8x1g.xml is missing";
  const std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto all = load_topology({});
  std::vector<std::string> codes;
  for (std::size_t i = 0; i < 8; ++i) codes.push_back(all.site(i).code);
  const auto t = select_sites(all, codes);
  const std::regex host("<host id=\"([A-Z]+)\"");
  std::vector<std::string> hosts;
  for (std::sregex_iterator i(xml.begin(), xml.end(), host), end; i != end; ++i)
    hosts.push_back((*i)[1]);
  EXPECT_EQ(hosts, codes);
  const std::regex pair(
      "<link id=\"([A-Z]+)-([A-Z]+)\" bandwidth=\"1Pbps\" "
      "latency=\"([0-9.]+)ms\" sharing_policy=\"FATPIPE\"/>");
  std::size_t pairs = 0;
  for (std::sregex_iterator i(xml.begin(), xml.end(), pair), end; i != end; ++i, ++pairs) {
    EXPECT_NEAR(std::stod((*i)[3]) * 1e-3, t.latency_s(t.index_of((*i)[1]), t.index_of((*i)[2])),
                1e-9)
        << (*i)[0];
  }
  EXPECT_EQ(pairs, 28u);
  EXPECT_NE(xml.find("bandwidth=\"1Gbps\" latency=\"0us\" sharing_policy=\"SPLITDUPLEX\""),
            std::string::npos);
  EXPECT_NE(xml.find(std::string("<prop id=\"atoll_smpi_cfg\" value=\"") + kWanSmpiCollectives),
            std::string::npos);
}

TEST(SmpiPlatform, AsymmetricLatenciesGetOneLinkAndRoutePerDirection) {
  auto t = line({0, 0.010, 0.020, 0}, 1 << 20);
  const auto xml = smpi_platform_xml(t, {});
  EXPECT_NE(xml.find("<link id=\"A-B\" bandwidth=\"1Pbps\" latency=\"10.000000ms\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<link id=\"B-A\" bandwidth=\"1Pbps\" latency=\"20.000000ms\""),
            std::string::npos);
  EXPECT_NE(xml.find("<route src=\"B\" dst=\"A\" symmetrical=\"NO\">"), std::string::npos);
  EXPECT_EQ(xml.find("atoll_smpi_cfg"), std::string::npos);  // none asked for
}

// Sites of several ranks (node_cores): every host has that many cores and a route to itself
// over its own loopback link; with one core neither appears.
TEST(SmpiPlatform, NodeCoresGiveEveryHostCoresAndALoopbackRoute) {
  const auto t = line({0, 0.010, 0.010, 0}, 1 << 20);
  const auto one = smpi_platform_xml(t, {});
  EXPECT_EQ(one.find("core="), std::string::npos);
  EXPECT_EQ(one.find("loopback"), std::string::npos);
  const auto xml = smpi_platform_xml(t, {.node_cores = 2});
  const std::regex host("<host id=\"([A-Za-z0-9]+)\" speed=\"1Gf\" core=\"2\"/>");
  const std::regex link(
      "<link id=\"([A-Za-z0-9]+)-loopback\" bandwidth=\"20GBps\" latency=\"0.5us\" "
      "sharing_policy=\"FATPIPE\"/>");
  const std::regex self(
      "<route src=\"([A-Za-z0-9]+)\" dst=\"\\1\"><link_ctn id=\"\\1-loopback\"/></route>");
  for (const auto* re : {&host, &link, &self}) {
    EXPECT_EQ(
        std::distance(std::sregex_iterator(xml.begin(), xml.end(), *re), std::sregex_iterator()),
        static_cast<std::ptrdiff_t>(t.size()))
        << xml;
  }
  EXPECT_THROW(smpi_platform_xml(t, {.node_cores = 0}), std::invalid_argument);
}

TEST(SmpiPlatform, BandwidthUnitsAndBadInput) {
  EXPECT_DOUBLE_EQ(parse_bandwidth_bits_per_s("1Gbps"), 1e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_bits_per_s("2.5Mbps"), 2.5e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth_bits_per_s("10GBps"), 80e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_bits_per_s("100bps"), 100);
  for (const char* bad : {"1", "Gbps", "0Gbps", "-1Gbps", "1Gbit", "1xGbps", "infGbps"})
    EXPECT_THROW(parse_bandwidth_bits_per_s(bad), std::invalid_argument) << bad;
  const auto t = line({0, 0.010, 0.010, 0}, 1 << 20);
  EXPECT_THROW(smpi_platform_xml(t, {.access_bits_per_s = 0}), std::invalid_argument);
  EXPECT_THROW(smpi_platform_xml(t, {.name = "a\"b"}), std::invalid_argument);
  EXPECT_NE(smpi_platform_xml(t, {.access_bits_per_s = 2.5e6}).find("bandwidth=\"2500kbps\""),
            std::string::npos);
}

}  // namespace
