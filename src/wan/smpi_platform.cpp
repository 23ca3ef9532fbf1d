#include "atoll/wan/smpi_platform.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace atl::wan {
namespace {

// `value` with the largest SI prefix that leaves a whole number ("1Gbps" for 1e9 bps, "1Gf" for
// 1e9 flop/s), else plain.
std::string with_prefix(double value, const char* unit) {
  constexpr std::pair<double, const char*> kPrefixes[] = {
      {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [scale, prefix] : kPrefixes) {
    const double v = value / scale;
    if (v >= 1 && v == std::round(v)) return fmt::format("{}{}{}", v, prefix, unit);
  }
  return fmt::format("{:.17g}{}", value, unit);
}

bool symmetric(const Topology& t) {
  for (std::size_t i = 0; i < t.size(); ++i)
    for (std::size_t j = i + 1; j < t.size(); ++j)
      if (t.latency_s(i, j) != t.latency_s(j, i)) return false;
  return true;
}

void check_attribute(const char* what, const std::string& text) {
  if (text.find_first_of("\"<&") != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("{} '{}' cannot go into an XML attribute (contains \", < or &)", what, text));
  }
}

}  // namespace

std::string smpi_platform_xml(const Topology& t, const SmpiPlatformOptions& o) {
  if (!(o.access_bits_per_s > 0 && std::isfinite(o.access_bits_per_s))) {
    throw std::invalid_argument(
        fmt::format("access bandwidth must be a positive number of bit/s "
                    "(got {})",
                    o.access_bits_per_s));
  }
  if (o.node_cores < 1) {
    throw std::invalid_argument(
        fmt::format("cores per host must be at least 1 (got {})", o.node_cores));
  }
  if (!(o.host_speed_flops > 0 && std::isfinite(o.host_speed_flops))) {
    throw std::invalid_argument(
        fmt::format("host speed must be a positive number of flop/s (got {})", o.host_speed_flops));
  }
  check_attribute("platform name", o.name);
  check_attribute("SMPI settings", o.smpi_cfg);
  for (const auto& s : t.sites()) check_attribute("site code", s.code);
  if (o.comment.find("-->") != std::string::npos)
    throw std::invalid_argument("the platform comment cannot contain '-->'");

  const bool sym = symmetric(t);
  const std::string access = with_prefix(o.access_bits_per_s, "bps");
  std::string x;
  x += "<?xml version='1.0'?>\n";
  x += "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n";
  x += fmt::format(
      "<!-- {}: {} sites, one host each behind a {} full-duplex access link, one-way latencies "
      "between sites from the WAN topology model (Topology::latency_s).\n",
      o.name, t.size(), access);
  if (!o.comment.empty()) x += "     " + o.comment + "\n";
  x += "     -->\n";
  x += "<platform version=\"4.1\">\n";
  x += fmt::format("  <zone id=\"{}\" routing=\"Full\">\n", o.name);
  if (!o.smpi_cfg.empty())
    x += fmt::format("    <prop id=\"atoll_smpi_cfg\" value=\"{}\"/>\n", o.smpi_cfg);
  const std::string cores =
      o.node_cores > 1 ? fmt::format(" core=\"{}\"", o.node_cores) : std::string();
  for (const auto& s : t.sites()) {
    x += fmt::format("    <host id=\"{}\" speed=\"{}\"{}/>  <!-- {}, {} -->\n", s.code,
                     with_prefix(o.host_speed_flops, "f"), cores, s.name, s.continent);
  }
  if (o.node_cores > 1) {  // the ranks of a site reach each other through shared memory
    for (const auto& s : t.sites()) {
      x += fmt::format(
          "    <link id=\"{}-loopback\" bandwidth=\"20GBps\" latency=\"0.5us\" "
          "sharing_policy=\"FATPIPE\"/>\n",
          s.code);
    }
  }
  for (const auto& s : t.sites()) {
    x += fmt::format(
        "    <link id=\"{}-access\" bandwidth=\"{}\" latency=\"0us\" "
        "sharing_policy=\"SPLITDUPLEX\"/>\n",
        s.code, access);
  }
  // One latency link per pair (per ordered pair when the latencies are not symmetric).
  const auto pair_link = [&](std::size_t a, std::size_t b) {
    return fmt::format(
        "    <link id=\"{}-{}\" bandwidth=\"1Pbps\" latency=\"{:.6f}ms\" "
        "sharing_policy=\"FATPIPE\"/>\n",
        t.site(a).code, t.site(b).code, t.latency_s(a, b) * 1e3);
  };
  const auto route = [&](std::size_t a, std::size_t b) {
    const auto& A = t.site(a).code;
    const auto& B = t.site(b).code;
    return fmt::format(
        "    <route src=\"{0}\" dst=\"{1}\" symmetrical=\"{2}\">"
        "<link_ctn id=\"{0}-access\" direction=\"UP\"/><link_ctn id=\"{0}-{1}\"/>"
        "<link_ctn id=\"{1}-access\" direction=\"DOWN\"/></route>\n",
        A, B, sym ? "YES" : "NO");
  };
  for (std::size_t a = 0; a < t.size(); ++a)
    for (std::size_t b = 0; b < t.size(); ++b)
      if (a < b || (a > b && !sym)) x += pair_link(a, b);
  for (std::size_t a = 0; a < t.size(); ++a)
    for (std::size_t b = 0; b < t.size(); ++b)
      if (a < b || (a > b && !sym)) x += route(a, b);
  if (o.node_cores > 1) {
    for (const auto& s : t.sites()) {
      x += fmt::format(
          "    <route src=\"{0}\" dst=\"{0}\"><link_ctn id=\"{0}-loopback\"/></route>\n", s.code);
    }
  }
  x += "  </zone>\n";
  x += "</platform>\n";
  return x;
}

double parse_bandwidth_bits_per_s(const std::string& text) {
  constexpr std::pair<const char*, double> kUnits[] = {
      {"Tbps", 1e12}, {"Gbps", 1e9}, {"Mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
      {"TBps", 8e12}, {"GBps", 8e9}, {"MBps", 8e6}, {"kBps", 8e3}, {"Bps", 8}};
  for (const auto& [unit, scale] : kUnits) {
    const std::string u = unit;
    if (text.size() <= u.size() || text.compare(text.size() - u.size(), u.size(), u) != 0) continue;
    const std::string number = text.substr(0, text.size() - u.size());
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(number, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == number.size() && v > 0 && std::isfinite(v)) return v * scale;
    break;
  }
  throw std::invalid_argument(fmt::format(
      "bandwidth must be a positive number with a unit, like 1Gbps (got '{}'; units: bps kbps "
      "Mbps Gbps Tbps, or Bps with the same prefixes for bytes)",
      text));
}

}  // namespace atl::wan
