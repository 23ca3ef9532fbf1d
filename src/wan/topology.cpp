#include "atoll/wan/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#ifndef ATOLL_DATA_DIR
#define ATOLL_DATA_DIR "data"
#endif

namespace atl::wan {
namespace {

constexpr double kEarthRadiusKm = 6371.0;

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, ',')) {
    const auto b = field.find_first_not_of(" \t\r");
    const auto e = field.find_last_not_of(" \t\r");
    fields.push_back(b == std::string::npos ? "" : field.substr(b, e - b + 1));
  }
  return fields;
}

double parse_number(const std::string& text, const std::string& file, int line, const char* what) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v)) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    throw TopologyError(fmt::format("{}:{}: {} '{}' is not a number", file, line, what, text));
  }
}

}  // namespace

double great_circle_km(double lat1_deg, double lon1_deg, double lat2_deg, double lon2_deg) {
  const double rad = M_PI / 180.0;
  const double dlat = (lat2_deg - lat1_deg) * rad, dlon = (lon2_deg - lon1_deg) * rad;
  const double a =
      std::sin(dlat / 2) * std::sin(dlat / 2) +
      std::cos(lat1_deg * rad) * std::cos(lat2_deg * rad) * std::sin(dlon / 2) * std::sin(dlon / 2);
  return 2 * kEarthRadiusKm * std::asin(std::min(1.0, std::sqrt(a)));
}

Topology::Topology(std::vector<Site> sites, const LatencyModel& model) : sites_(std::move(sites)) {
  if (sites_.size() < 2) {
    throw TopologyError(fmt::format("a topology needs at least two sites (got {})", sites_.size()));
  }
  for (std::size_t i = 0; i < sites_.size(); ++i) {
    const Site& s = sites_[i];
    if (!(s.egress_bytes_per_s > 0) || !(s.ingress_bytes_per_s > 0)) {
      throw TopologyError(
          fmt::format("site {}: bandwidth must be positive (egress {} B/s, ingress {} B/s)", s.code,
                      s.egress_bytes_per_s, s.ingress_bytes_per_s));
    }
    if (std::abs(s.latitude_deg) > 90 || std::abs(s.longitude_deg) > 180) {
      throw TopologyError(fmt::format("site {}: coordinates ({}, {}) out of range", s.code,
                                      s.latitude_deg, s.longitude_deg));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (sites_[j].code == s.code) throw TopologyError("duplicate site code " + s.code);
    }
  }
  const std::size_t n = sites_.size();
  latency_s_.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const double km = great_circle_km(sites_[i].latitude_deg, sites_[i].longitude_deg,
                                        sites_[j].latitude_deg, sites_[j].longitude_deg);
      const double inflation = sites_[i].continent == sites_[j].continent
                                   ? model.inflation_same_continent
                                   : model.inflation_cross_continent;
      if (model.kind == LatencyModelKind::affine) {
        const auto& a = sites_[i].continent == sites_[j].continent ? model.affine_same_continent
                                                                   : model.affine_cross_continent;
        latency_s_[i * n + j] = std::max(0.0, a.fixed_s + a.per_km_s * km);
      } else {
        latency_s_[i * n + j] = km * inflation / model.fiber_km_per_s;
      }
    }
  }
}

std::size_t Topology::index_of(const std::string& code) const {
  for (std::size_t i = 0; i < sites_.size(); ++i)
    if (sites_[i].code == code) return i;
  std::string known;
  for (const auto& s : sites_) known += (known.empty() ? "" : ", ") + s.code;
  throw TopologyError(fmt::format("unknown site '{}' (known: {})", code, known));
}

void Topology::set_latency_matrix(const std::vector<double>& seconds) {
  const std::size_t n = size();
  if (seconds.size() != n * n) {
    throw TopologyError(
        fmt::format("latency matrix has {} entries, need {}", seconds.size(), n * n));
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const double v = seconds[i * n + j];
      if (!(v >= 0) || (i == j && v != 0)) {
        throw TopologyError(
            fmt::format("latency {} -> {} = {} s is invalid", sites_[i].code, sites_[j].code, v));
      }
    }
  }
  latency_s_ = seconds;
}

Topology load_topology_csv(const std::filesystem::path& file, const SiteDefaults& defaults,
                           const LatencyModel& model) {
  std::ifstream in(file);
  if (!in) throw TopologyError("cannot read topology file " + file.string());
  return parse_topology_csv(in, file.string(), defaults, model);
}

Topology parse_topology_csv(std::istream& in, const std::string& file, const SiteDefaults& defaults,
                            const LatencyModel& model) {
  std::vector<Site> sites;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#' || line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    const auto f = split_csv(line);
    if (f.size() != 5 && f.size() != 8) {
      throw TopologyError(fmt::format(
          "{}:{}: expected 5 or 8 columns (code,name,continent,latitude_deg,longitude_deg"
          "[,egress_gbps,ingress_gbps,fpga_memory_mb]), got {}",
          file, number, f.size()));
    }
    Site s;
    s.code = f[0];
    s.name = f[1];
    s.continent = f[2];
    s.latitude_deg = parse_number(f[3], file, number, "latitude");
    s.longitude_deg = parse_number(f[4], file, number, "longitude");
    s.egress_bytes_per_s = defaults.egress_bytes_per_s;
    s.ingress_bytes_per_s = defaults.ingress_bytes_per_s;
    s.fpga_memory_bytes = defaults.fpga_memory_bytes;
    if (f.size() == 8) {
      s.egress_bytes_per_s = parse_number(f[5], file, number, "egress_gbps") * 1e9 / 8;
      s.ingress_bytes_per_s = parse_number(f[6], file, number, "ingress_gbps") * 1e9 / 8;
      const double mb = parse_number(f[7], file, number, "fpga_memory_mb");
      // Below 2^64 bytes (16 EB): a larger value does not convert to a byte count.
      if (mb < 0 || mb * 1e6 >= 0x1p64) {
        throw TopologyError(
            fmt::format("{}:{}: FPGA memory {} MB out of range [0, 1.8e13)", file, number, f[7]));
      }
      s.fpga_memory_bytes = static_cast<std::uint64_t>(mb * 1e6);
    }
    sites.push_back(std::move(s));
  }
  return Topology(std::move(sites), model);
}

void load_latency_matrix_csv(Topology& topology, const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw TopologyError("cannot read latency matrix " + file.string());
  parse_latency_matrix_csv(topology, in, file.string());
}

void parse_latency_matrix_csv(Topology& topology, std::istream& in, const std::string& file) {
  std::string line;
  std::vector<std::size_t> columns;
  const std::size_t n = topology.size();
  std::vector<double> seconds(n * n, -1.0);
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    const auto f = split_csv(line);
    if (columns.empty()) {
      for (std::size_t k = 1; k < f.size(); ++k) columns.push_back(topology.index_of(f[k]));
      continue;
    }
    if (f.size() != columns.size() + 1) {
      throw TopologyError(fmt::format("{}:{}: {} columns, header has {}", file, number, f.size(),
                                      columns.size() + 1));
    }
    const std::size_t row = topology.index_of(f[0]);
    for (std::size_t k = 0; k < columns.size(); ++k) {
      seconds[row * n + columns[k]] = parse_number(f[k + 1], file, number, "latency_ms") / 1e3;
    }
  }
  for (std::size_t i = 0; i < n * n; ++i) {
    if (seconds[i] < 0) {
      throw TopologyError(fmt::format("latency matrix {} lacks {} -> {}", file,
                                      topology.site(i / n).code, topology.site(i % n).code));
    }
  }
  topology.set_latency_matrix(seconds);
}

const char* to_string(LatencyModelKind kind) {
  return kind == LatencyModelKind::affine ? "affine" : "fiber";
}

LatencyModelKind parse_latency_model(const std::string& text) {
  if (text == "fiber") return LatencyModelKind::fiber;
  if (text == "affine") return LatencyModelKind::affine;
  throw std::invalid_argument(
      fmt::format("latency model must be 'fiber' or 'affine' (got '{}')", text));
}

std::vector<LatencySample> load_latency_samples_csv(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw TopologyError("cannot read latency samples " + file.string());
  return parse_latency_samples_csv(in, file.string());
}

std::vector<LatencySample> parse_latency_samples_csv(std::istream& in, const std::string& file) {
  std::vector<LatencySample> out;
  std::string line;
  int number = 0;
  bool header = true;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    if (header) {  // from,to,rtt_ms,...
      header = false;
      continue;
    }
    const auto f = split_csv(line);
    if (f.size() != 9) {
      throw TopologyError(fmt::format(
          "{}:{}: expected 9 columns (from,to,rtt_ms,from_lat,from_lon,from_continent,to_lat,"
          "to_lon,to_continent), got {}",
          file, number, f.size()));
    }
    LatencySample s;
    s.from = f[0];
    s.to = f[1];
    const double rtt_ms = parse_number(f[2], file, number, "rtt_ms");
    if (!(rtt_ms > 0))
      throw TopologyError(fmt::format("{}:{}: rtt_ms must be positive", file, number));
    s.one_way_s = rtt_ms / 2e3;
    s.distance_km = great_circle_km(
        parse_number(f[3], file, number, "from_lat"), parse_number(f[4], file, number, "from_lon"),
        parse_number(f[6], file, number, "to_lat"), parse_number(f[7], file, number, "to_lon"));
    s.same_continent = f[5] == f[8];
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

AffineClassFit fit_class(std::vector<LatencySample> used, const char* name) {
  AffineClassFit fit;
  for (;;) {
    const auto n = static_cast<double>(used.size());
    if (used.size() < 2)
      throw TopologyError(fmt::format("latency fit: fewer than 2 {} samples", name));
    double mx = 0, my = 0;
    for (const auto& s : used) {
      mx += s.distance_km / n;
      my += s.one_way_s / n;
    }
    double sxx = 0, sxy = 0, syy = 0;
    for (const auto& s : used) {
      sxx += (s.distance_km - mx) * (s.distance_km - mx);
      sxy += (s.distance_km - mx) * (s.one_way_s - my);
      syy += (s.one_way_s - my) * (s.one_way_s - my);
    }
    if (!(sxx > 0))
      throw TopologyError(fmt::format("latency fit: all {} samples at one distance", name));
    fit.line.per_km_s = sxy / sxx;
    fit.line.fixed_s = my - fit.line.per_km_s * mx;
    std::vector<double> residuals;
    for (const auto& s : used)
      residuals.push_back(s.one_way_s - fit.line.fixed_s - fit.line.per_km_s * s.distance_km);
    const double centre = median(residuals);
    std::vector<double> deviations;
    for (double r : residuals) deviations.push_back(std::abs(r - centre));
    const double limit = 3 * 1.4826 * median(deviations);
    std::vector<LatencySample> kept;
    for (std::size_t i = 0; i < used.size(); ++i) {
      if (limit > 0 && std::abs(residuals[i] - centre) > limit)
        fit.outliers.push_back(used[i]);
      else
        kept.push_back(used[i]);
    }
    if (kept.size() == used.size()) {
      double ss = 0;
      for (double r : residuals) {
        ss += r * r;
        fit.max_abs_residual_s = std::max(fit.max_abs_residual_s, std::abs(r));
      }
      fit.samples = used.size();
      fit.rms_residual_s = std::sqrt(ss / n);
      fit.r_squared = syy > 0 ? 1 - ss / syy : 1.0;
      return fit;
    }
    used = std::move(kept);
  }
}

}  // namespace

AffineLatencyFit fit_affine_latency(const std::vector<LatencySample>& samples) {
  std::vector<LatencySample> same, cross;
  for (const auto& s : samples) (s.same_continent ? same : cross).push_back(s);
  return {fit_class(std::move(same), "same-continent"),
          fit_class(std::move(cross), "cross-continent")};
}

LatencyModel affine_latency_model(const AffineLatencyFit& fit) {
  LatencyModel m;
  m.kind = LatencyModelKind::affine;
  m.affine_same_continent = fit.same_continent.line;
  m.affine_cross_continent = fit.cross_continent.line;
  return m;
}

std::filesystem::path default_latency_samples_file() {
  return std::filesystem::path(ATOLL_DATA_DIR) / "pings-2011.csv";
}

std::filesystem::path default_topology_file() {
  return std::filesystem::path(ATOLL_DATA_DIR) / "cities-9.csv";
}

namespace {

// `sites` with the latencies of `from` between the sites at `indices` (measured or modelled).
Topology with_latencies_of(const Topology& from, std::vector<Site> sites,
                           const std::vector<std::size_t>& indices) {
  const std::size_t n = indices.size();
  std::vector<double> latency(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) latency[i * n + j] = from.latency_s(indices[i], indices[j]);
  Topology t(std::move(sites));
  t.set_latency_matrix(latency);
  return t;
}

}  // namespace

Topology load_topology(const TopologyOptions& o) {
  const auto check = [](const char* what, const std::optional<double>& v) {
    if (v && !(*v > 0 && std::isfinite(*v)))
      throw std::invalid_argument(fmt::format("{} must be a positive number (got {})", what, *v));
  };
  check("FPGA memory override (bytes)", o.fpga_memory_bytes);
  check("egress override (bytes/s)", o.egress_bytes_per_s);
  check("ingress override (bytes/s)", o.ingress_bytes_per_s);
  SiteDefaults defaults;
  if (o.fpga_memory_bytes)
    defaults.fpga_memory_bytes = static_cast<std::uint64_t>(*o.fpga_memory_bytes);
  if (o.egress_bytes_per_s) defaults.egress_bytes_per_s = *o.egress_bytes_per_s;
  if (o.ingress_bytes_per_s) defaults.ingress_bytes_per_s = *o.ingress_bytes_per_s;
  LatencyModel model;
  if (o.latency_model == LatencyModelKind::affine) {
    model = affine_latency_model(fit_affine_latency(load_latency_samples_csv(
        o.latency_samples_file.empty() ? default_latency_samples_file() : o.latency_samples_file)));
  }
  auto t = load_topology_csv(o.topology_file.empty() ? default_topology_file() : o.topology_file,
                             defaults, model);
  if (!o.latency_matrix_file.empty()) load_latency_matrix_csv(t, o.latency_matrix_file);
  if (!o.fpga_memory_bytes && !o.egress_bytes_per_s && !o.ingress_bytes_per_s) return t;
  auto sites = t.sites();  // the overrides replace per-site values from the file too
  for (auto& s : sites) {
    if (o.fpga_memory_bytes) s.fpga_memory_bytes = static_cast<std::uint64_t>(*o.fpga_memory_bytes);
    if (o.egress_bytes_per_s) s.egress_bytes_per_s = *o.egress_bytes_per_s;
    if (o.ingress_bytes_per_s) s.ingress_bytes_per_s = *o.ingress_bytes_per_s;
  }
  std::vector<std::size_t> all(t.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return with_latencies_of(t, std::move(sites), all);
}

Topology select_sites(const Topology& t, const std::vector<std::string>& codes) {
  std::vector<std::size_t> indices;
  std::vector<Site> sites;
  std::set<std::string> seen;
  for (const auto& code : codes) {
    if (!seen.insert(code).second)
      throw TopologyError(fmt::format("site '{}' is selected twice", code));
    indices.push_back(t.index_of(code));
    sites.push_back(t.site(indices.back()));
  }
  return with_latencies_of(t, std::move(sites), indices);
}

}  // namespace atl::wan
