#include "atoll/comm/cpu_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "atoll/util/files.h"

namespace atl::comm {

void CpuCostSamples::add(double x, double b, double y) {
  const std::array<double, kFields> v{1, x, b, y, x * x, x * b, b * b, x * y, b * y, y * y};
  for (std::size_t i = 0; i < kFields; ++i) s[i] += v[i];
}

void CpuCostSamples::merge(const CpuCostSamples& other) {
  for (std::size_t i = 0; i < kFields; ++i) s[i] += other.s[i];
}

namespace {

// Solves the k x k system a c = r (k <= 3) by Gaussian elimination with partial pivoting; false
// when it is singular.
bool solve(std::array<std::array<double, 3>, 3> a, std::array<double, 3> r, std::size_t k,
           std::array<double, 3>& c) {
  for (std::size_t col = 0; col < k; ++col) {
    std::size_t pivot = col;
    for (std::size_t i = col + 1; i < k; ++i)
      if (std::fabs(a[i][col]) > std::fabs(a[pivot][col])) pivot = i;
    if (std::fabs(a[pivot][col]) < 1e-300) return false;
    std::swap(a[col], a[pivot]);
    std::swap(r[col], r[pivot]);
    for (std::size_t i = col + 1; i < k; ++i) {
      const double f = a[i][col] / a[col][col];
      for (std::size_t j = col; j < k; ++j) a[i][j] -= f * a[col][j];
      r[i] -= f * r[col];
    }
  }
  for (std::size_t i = k; i-- > 0;) {
    double v = r[i];
    for (std::size_t j = i + 1; j < k; ++j) v -= a[i][j] * c[j];
    c[i] = v / a[i][i];
  }
  return true;
}

}  // namespace

CpuCost fit_cpu_cost(const CpuCostSamples& samples) {
  const auto& s = samples.s;
  if (s[0] <= 0) return {};
  // Regressors 0 = call (1), 1 = items, 2 = bytes: their Gram matrix and products with y.
  const double gram[3][3] = {{s[0], s[1], s[2]}, {s[1], s[4], s[5]}, {s[2], s[5], s[6]}};
  const double rhs[3] = {s[3], s[7], s[8]};
  std::array<double, 3> best{0, 0, 0};
  double best_residual = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < 8; ++mask) {
    std::array<std::size_t, 3> use{};
    std::size_t k = 0;
    for (std::size_t i = 0; i < 3; ++i)
      if (mask & (1u << i)) use[k++] = i;
    std::array<std::array<double, 3>, 3> a{};
    std::array<double, 3> r{}, c{};
    for (std::size_t i = 0; i < k; ++i) {
      r[i] = rhs[use[i]];
      for (std::size_t j = 0; j < k; ++j) a[i][j] = gram[use[i]][use[j]];
    }
    if (!solve(a, r, k, c)) continue;
    if (std::any_of(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k),
                    [](double v) { return !(v >= 0); }))
      continue;
    // Σ(y - ĉ·z)² = Σyy - 2 ĉ·r + ĉᵀ A ĉ
    double residual = s[9];
    for (std::size_t i = 0; i < k; ++i) {
      residual -= 2 * c[i] * r[i];
      for (std::size_t j = 0; j < k; ++j) residual += c[i] * a[i][j] * c[j];
    }
    if (residual < best_residual) {
      best_residual = residual;
      best = {0, 0, 0};
      for (std::size_t i = 0; i < k; ++i) best[use[i]] = c[i];
    }
  }
  return CpuCost{1e9 * best[0], 1e9 * best[1], 1e9 * best[2]};
}

namespace {
// Zen's variants: each has its own element operations, and all share the row path (zen_rows.*).
constexpr std::array<const char*, 3> kZenVariants{"zen_coo", "zen", "zen_ef"};
// Operations no longer charged that tables recorded before may hold: read and ignored.
// zen*.check_push: since commit 75d4079 the aggregation checks the push (zen.aggregate).
constexpr std::array<const char*, 3> kRetiredOps{"zen_coo.check_push", "zen.check_push",
                                                 "zen_ef.check_push"};
}  // namespace

const std::vector<std::string>& cpu_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v{"allreduce.densify",   "agsparse.encode",     "agsparse.check",
                               "agsparse.sum",        "sparcml.encode",      "sparcml.decode",
                               "sparcml.accumulate",  "omnireduce.encode",   "omnireduce.aggregate",
                               "omnireduce.decode",   "sparse_ps.partition", "sparse_ps.check_push",
                               "sparse_ps.aggregate", "sparse_ps.decode",    "auto.profile"};
    // (No "check_push": zen_aggregate checks the push as it adds it; kRetiredOps.)
    for (const char* zen : kZenVariants)
      for (const char* step : {"partition", "aggregate", "plan", "encode", "decode", "push_merge"})
        v.push_back(fmt::format("{}.{}", zen, step));
    // Every Zen variant's row path; "view": the decode that leaves the values in place
    // (SchemeOptions::row_views).
    for (const char* step : {"partition", "aggregate", "encode", "decode", "view"})
      v.push_back(fmt::format("zen_rows.{}", step));
    return v;
  }();
  return ops;
}

std::size_t cpu_op_id(std::string_view op) {
  const auto& ops = cpu_ops();
  const auto it = std::find(ops.begin(), ops.end(), op);
  if (it == ops.end()) throw std::logic_error(fmt::format("unknown cpu cost operation '{}'", op));
  return static_cast<std::size_t>(it - ops.begin());
}

CpuCostTable::CpuCostTable() : costs(cpu_ops().size()), samples(cpu_ops().size()) {}

void CpuCostTable::merge(const std::vector<CpuCostSamples>& more, const std::string& calibration) {
  if (more.size() != samples.size())
    throw std::logic_error("CpuCostTable::merge: samples for another list of operations");
  for (std::size_t i = 0; i < samples.size(); ++i) {
    samples[i].merge(more[i]);
    costs[i] = fit_cpu_cost(samples[i]);
  }
  calibrations.push_back(calibration);
}

std::vector<std::string> CpuCostTable::unmeasured() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < samples.size(); ++i)
    if (samples[i].empty()) out.push_back(cpu_ops()[i]);
  return out;
}

std::vector<std::string> CpuCostTable::unmeasured(const std::vector<std::string>& schemes,
                                                  bool rows) const {
  auto out = unmeasured();
  auto in = [](const std::vector<std::string>& v, std::string_view x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  if (in(schemes, "auto")) return out;
  auto charged = schemes;
  if (rows && std::any_of(kZenVariants.begin(), kZenVariants.end(),
                          [&](const char* zen) { return in(schemes, zen); }))
    charged.emplace_back("zen_rows");
  std::erase_if(out, [&](const std::string& op) {
    return !in(charged, std::string_view(op).substr(0, op.find('.')));
  });
  return out;
}

namespace {

double cost_field(const nlohmann::json& op, const std::string& file, const std::string& name,
                  const char* field) {
  if (!op.contains(field) || !op[field].is_number())
    throw std::runtime_error(
        fmt::format("{}: operation '{}' has no number '{}'", file, name, field));
  const double v = op[field].get<double>();
  if (!std::isfinite(v) || v < 0)
    throw std::runtime_error(
        fmt::format("{}: operation '{}': {} = {} (must be finite and >= 0)", file, name, field, v));
  return v;
}

}  // namespace

CpuCostTable CpuCostTable::load(const std::filesystem::path& path) {
  return parse(util::read_file(path), path.string());
}

CpuCostTable CpuCostTable::parse(std::span<const std::uint8_t> bytes, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range
    throw std::runtime_error(fmt::format("{}: not JSON: {}", file, e.what()));
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != "atoll-cpu-costs")
    throw std::runtime_error(
        fmt::format("{}: not an atoll cpu cost table (\"format\" must be "
                    "\"atoll-cpu-costs\")",
                    file));
  if (!j.contains("version") || j["version"] != 1)
    throw std::runtime_error(
        fmt::format("{}: unsupported version (this build reads version 1)", file));
  if (!j.contains("ops") || !j["ops"].is_object())
    throw std::runtime_error(fmt::format("{}: no object \"ops\"", file));
  CpuCostTable t;
  for (const auto& [name, op] : j["ops"].items()) {
    const auto& ops = cpu_ops();
    const auto it = std::find(ops.begin(), ops.end(), name);
    if (it == ops.end() &&
        std::find(kRetiredOps.begin(), kRetiredOps.end(), name) != kRetiredOps.end())
      continue;
    if (it == ops.end())
      throw std::runtime_error(fmt::format("{}: unknown operation '{}'", file, name));
    const auto id = static_cast<std::size_t>(it - ops.begin());
    if (!op.is_object())
      throw std::runtime_error(fmt::format("{}: operation '{}' is not an object", file, name));
    t.costs[id] = CpuCost{cost_field(op, file, name, "ns_per_call"),
                          cost_field(op, file, name, "ns_per_item"),
                          cost_field(op, file, name, "ns_per_byte")};
    if (op.contains("samples")) {
      const auto& s = op["samples"];
      if (!s.is_array() || s.size() != CpuCostSamples::kFields)
        throw std::runtime_error(fmt::format("{}: operation '{}': \"samples\" must be {} numbers",
                                             file, name, CpuCostSamples::kFields));
      for (std::size_t k = 0; k < CpuCostSamples::kFields; ++k) {
        if (!s[k].is_number() || !std::isfinite(s[k].get<double>()))
          throw std::runtime_error(
              fmt::format("{}: operation '{}': samples[{}] is not a finite "
                          "number",
                          file, name, k));
        t.samples[id].s[k] = s[k].get<double>();
      }
    }
  }
  // An operation the file does not list (a table calibrated before it existed) stays unmeasured:
  // charged 0, and `bench sync --cpu-cost` names it in a warning (CpuCostTable::unmeasured).
  if (j.contains("calibrations") && j["calibrations"].is_array())
    for (const auto& c : j["calibrations"])
      if (c.is_string()) t.calibrations.push_back(c.get<std::string>());
  return t;
}

void CpuCostTable::save(const std::filesystem::path& file) const {
  nlohmann::json ops = nlohmann::json::object();
  for (std::size_t i = 0; i < costs.size(); ++i) {
    ops[cpu_ops()[i]] = {{"ns_per_call", costs[i].ns_per_call},
                         {"ns_per_item", costs[i].ns_per_item},
                         {"ns_per_byte", costs[i].ns_per_byte},
                         {"samples", samples[i].s}};
  }
  const nlohmann::json j{
      {"format", "atoll-cpu-costs"}, {"version", 1}, {"calibrations", calibrations}, {"ops", ops}};
  util::write_file_atomic(file, j.dump(1) + "\n");
}

}  // namespace atl::comm
