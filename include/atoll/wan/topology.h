// Wide-area topology: sites (islands of compute) with coordinates, per-site WAN egress / ingress
// bandwidth and edge-FPGA memory, and the one-way latency between every pair of sites.
//
// Latency model (docs and shared notes, wan.md): ℓ_ij = d_ij · inflation / v, where d_ij is the
// great-circle distance (haversine, mean Earth radius 6371 km), v = 204,000 km/s (light in fiber,
// ≈ 4.9 µs/km) and the route inflation factor depends on the link class: sites on the same
// continent or on different continents. A measured matrix may replace the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace atl::wan {

// Bad topology input (unknown site, negative bandwidth, unreadable file...).
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Site {
  std::string code;  // e.g. "LON"
  std::string name;
  std::string continent;
  double latitude_deg = 0;
  double longitude_deg = 0;
  double egress_bytes_per_s = 0;
  double ingress_bytes_per_s = 0;
  std::uint64_t fpga_memory_bytes = 0;
};

struct LatencyModel {
  double fiber_km_per_s = 204'000;
  double inflation_same_continent = 1.2;   // dedicated, mostly direct routes
  double inflation_cross_continent = 1.5;  // submarine cables, detours
};

// Defaults for columns a site file leaves out.
struct SiteDefaults {
  double egress_bytes_per_s = 100e9 / 8;  // 100 Gbit/s
  double ingress_bytes_per_s = 100e9 / 8;
  std::uint64_t fpga_memory_bytes = std::uint64_t{1} << 30;  // 1 GiB
};

class Topology {
 public:
  // Throws TopologyError if fewer than two sites, duplicate codes, or a negative/zero bandwidth.
  Topology(std::vector<Site> sites, const LatencyModel& model = {});

  std::size_t size() const { return sites_.size(); }
  const std::vector<Site>& sites() const { return sites_; }
  const Site& site(std::size_t i) const { return sites_.at(i); }
  // Index of the site with this code (case-sensitive); TopologyError naming it if unknown.
  std::size_t index_of(const std::string& code) const;
  // One-way latency in seconds.
  double latency_s(std::size_t from, std::size_t to) const {
    return latency_s_[from * size() + to];
  }
  // Replaces the modelled latencies with a measured matrix (seconds, size() × size(), zero
  // diagonal, non-negative). TopologyError on a bad matrix.
  void set_latency_matrix(const std::vector<double>& seconds);

 private:
  std::vector<Site> sites_;
  std::vector<double> latency_s_;
};

// Great-circle distance in km between two points given in degrees.
double great_circle_km(double lat1_deg, double lon1_deg, double lat2_deg, double lon2_deg);

// Reads sites from CSV: `code,name,continent,latitude_deg,longitude_deg` and optionally
// `,egress_gbps,ingress_gbps,fpga_memory_mb`; lines starting with '#' are comments. Missing
// optional columns take `defaults`.
Topology load_topology_csv(const std::filesystem::path& file, const SiteDefaults& defaults = {},
                           const LatencyModel& model = {});

// Reads a measured one-way latency matrix (milliseconds) as CSV: a header `code,A,B,...` then one
// row per site `A,0,x,...`, in any order; every site of `topology` must appear.
void load_latency_matrix_csv(Topology& topology, const std::filesystem::path& file);

// The nine-city topology shipped with atoll (data/cities-9.csv in the source tree).
std::filesystem::path default_topology_file();

// Where a topology comes from and what replaces the file's per-site values. Each override, when
// given, applies to every site, including sites whose file row sets the value.
struct TopologyOptions {
  std::filesystem::path topology_file;        // empty: default_topology_file()
  std::filesystem::path latency_matrix_file;  // empty: modelled latencies (load_latency_matrix_csv)
  std::optional<double> fpga_memory_bytes;    // > 0, rounded down to whole bytes
  std::optional<double> egress_bytes_per_s, ingress_bytes_per_s;  // > 0
};

// Reads the topology (and latency matrix) the options name and applies the overrides; the
// latencies are those of the file (modelled, or measured), whatever the overrides.
// std::invalid_argument if an override is not positive and finite; TopologyError on bad files.
Topology load_topology(const TopologyOptions& options);

// The sites named by `codes`, in that order, with their latencies (modelled or measured) kept.
// TopologyError naming an unknown or repeated code, or if fewer than two remain.
Topology select_sites(const Topology& topology, const std::vector<std::string>& codes);

}  // namespace atl::wan
