// Wide-area topology: sites (islands of compute) with coordinates, per-site WAN egress / ingress
// bandwidth and edge-FPGA memory, and the one-way latency between every pair of sites.
//
// Latency models (docs and shared notes, wan.md), d_ij the great-circle distance (haversine,
// mean Earth radius 6371 km), per link class (sites on the same continent or on different ones):
// - fiber (dedicated networks): ℓ_ij = d_ij · inflation / v, v = 204,000 km/s (light in fiber,
//   ≈ 4.9 µs/km), inflation 1.2 within a continent, 1.5 across;
// - affine (the public internet): ℓ_ij = fixed + per_km · d_ij, fitted by least squares to
//   measured city-pair pings (fit_affine_latency, data/pings-2011.csv: WonderProxy 2011). Within a
//   continent the fiber model was 1.5-5x too low (Milan-Paris 7.5 vs 21.6 ms RTT): a fixed
//   per-path cost (routers, last miles, detours) is missing from it.
// A measured matrix may replace either.
#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
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

enum class LatencyModelKind { fiber, affine };

// One-way latency of a link class: fixed_s + per_km_s · distance.
struct AffineLatency {
  double fixed_s = 0;
  double per_km_s = 0;
};

struct LatencyModel {
  LatencyModelKind kind = LatencyModelKind::fiber;
  double fiber_km_per_s = 204'000;
  double inflation_same_continent = 1.2;                        // dedicated, mostly direct routes
  double inflation_cross_continent = 1.5;                       // submarine cables, detours
  AffineLatency affine_same_continent, affine_cross_continent;  // kind == affine
};

// "fiber" / "affine"; parse_latency_model throws std::invalid_argument naming the text otherwise.
const char* to_string(LatencyModelKind kind);
LatencyModelKind parse_latency_model(const std::string& text);

// One measured path: great-circle distance, link class, one-way latency (half the RTT).
struct LatencySample {
  std::string from, to;
  double distance_km = 0;
  bool same_continent = false;
  double one_way_s = 0;
};

// Reads pings as CSV `from,to,rtt_ms,from_lat,from_lon,from_continent,to_lat,to_lon,to_continent`
// (a header line, '#' comments): one sample per row (one per measured direction).
std::vector<LatencySample> load_latency_samples_csv(const std::filesystem::path& file);
// The same from a stream; `source` names it in errors (file:line: problem).
std::vector<LatencySample> parse_latency_samples_csv(std::istream& in, const std::string& source);

// The least-squares line of one link class and how well it fits.
struct AffineClassFit {
  AffineLatency line;
  std::size_t samples = 0;              // used in the fit
  std::vector<LatencySample> outliers;  // left out (see fit_affine_latency)
  double r_squared = 0;                 // 1 − SS_res / SS_tot over the samples used
  double rms_residual_s = 0;            // sqrt(mean residual²), one-way
  double max_abs_residual_s = 0;        // one-way
};

struct AffineLatencyFit {
  AffineClassFit same_continent, cross_continent;
};

// Ordinary least squares of one_way_s on distance_km per link class, after leaving out outliers:
// repeatedly, a sample whose residual is more than 3 robust standard deviations (1.4826 × the
// median absolute deviation of the residuals) from the median residual is dropped and the line
// refitted, until none is (routing detours such as the table's Baltimore-New York, 174 ms over
// 272 km). TopologyError if a class has fewer than 2 samples or a single distance.
AffineLatencyFit fit_affine_latency(const std::vector<LatencySample>& samples);

// The affine LatencyModel of a fit.
LatencyModel affine_latency_model(const AffineLatencyFit& fit);

// The city-pair pings shipped with atoll (data/pings-2011.csv in the source tree).
std::filesystem::path default_latency_samples_file();

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
Topology parse_topology_csv(std::istream& in, const std::string& source,
                            const SiteDefaults& defaults = {}, const LatencyModel& model = {});

// Reads a measured one-way latency matrix (milliseconds) as CSV: a header `code,A,B,...` then one
// row per site `A,0,x,...`, in any order; every site of `topology` must appear.
void load_latency_matrix_csv(Topology& topology, const std::filesystem::path& file);
void parse_latency_matrix_csv(Topology& topology, std::istream& in, const std::string& source);

// The nine-city topology shipped with atoll (data/cities-9.csv in the source tree).
std::filesystem::path default_topology_file();

// Where a topology comes from and what replaces the file's per-site values. Each override, when
// given, applies to every site, including sites whose file row sets the value.
struct TopologyOptions {
  std::filesystem::path topology_file;        // empty: default_topology_file()
  std::filesystem::path latency_matrix_file;  // empty: modelled latencies (load_latency_matrix_csv)
  // The model of the latencies when no matrix is given: fiber (dedicated links), or affine,
  // fitted to `latency_samples_file` (empty: default_latency_samples_file()) at load time.
  LatencyModelKind latency_model = LatencyModelKind::fiber;
  std::filesystem::path latency_samples_file;
  std::optional<double> fpga_memory_bytes;  // > 0, rounded down to whole bytes
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
