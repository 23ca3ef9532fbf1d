// Topology files: the sites CSV, then (after a line "---") a latency matrix CSV over those sites,
// then (after another "---") latency samples CSV, fitted as `atoll plan --latency-model affine`
// does (include/atoll/wan/topology.h).
#include "atoll/wan/topology.h"

#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace atl::wan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto cut1 = text.find("\n---\n");
  const auto cut2 = cut1 == std::string::npos ? cut1 : text.find("\n---\n", cut1 + 5);
  try {
    std::istringstream sites(text.substr(0, cut1));
    auto t = parse_topology_csv(sites, "fuzz-sites.csv");
    if (cut1 == std::string::npos) return 0;
    std::istringstream matrix(
        text.substr(cut1 + 5, cut2 == std::string::npos ? cut2 : cut2 - cut1 - 5));
    parse_latency_matrix_csv(t, matrix, "fuzz-matrix.csv");
    if (cut2 == std::string::npos) return 0;
    std::istringstream samples(text.substr(cut2 + 5));
    const auto fit = fit_affine_latency(parse_latency_samples_csv(samples, "fuzz-pings.csv"));
    Topology affine(t.sites(), affine_latency_model(fit));
  } catch (const TopologyError&) {
  }
  return 0;
}
