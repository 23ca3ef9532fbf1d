// `atoll bench sync`: verify, then time, every requested scheme on the same gradients.
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "../train/faults.h"  // --inject-fault's parser (torch-free, in atoll_core)
#include "atoll/cli/commands.h"
#include "atoll/comm/cpu_costs.h"
#include "atoll/comm/parallel.h"
#include "atoll/sparse/characteristics.h"
#include "atoll/sparse/trace.h"
#include "atoll/sync/entry_fold.h"
#include "atoll/sync/network_probe.h"
#include "atoll/sync/result_check.h"
#include "atoll/sync/scheme.h"
#include "atoll/util/fault_point.h"
#include "atoll/util/files.h"
#include "atoll/util/memory.h"

namespace atl::cli {
namespace {

using comm::Communicator;
using comm::CpuCharging;
using comm::ReduceOp;
using sparse::SparseGradient;

std::vector<std::string> resolve_schemes(const std::vector<std::string>& requested) {
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) != out.end()) {
      throw UsageError(
          fmt::format("--schemes names '{}' twice{}", name,
                      std::find(requested.begin(), requested.end(), "all") != requested.end()
                          ? " ('all' includes it)"
                          : ""));
    }
    out.push_back(name);
  };
  for (const auto& s : requested) {
    if (s == "all") {
      for (const auto& n : sync::scheme_names()) add(n);
    } else {
      sync::make_scheme(s);  // throws invalid_argument naming the valid schemes
      add(s);
    }
  }
  if (out.empty()) throw UsageError("--schemes is empty");
  return out;
}

// Loads this rank's gradient from the trace; any rank's failure becomes an error on every rank.
template <class Index>
SparseGradient<Index> load_trace(Communicator& comm, const std::string& dir, std::int64_t step) {
  std::optional<std::string> problem;
  SparseGradient<Index> g;
  try {
    std::uint64_t s = 0;
    const auto steps = sparse::trace_steps(dir, comm.rank());
    if (steps.empty())
      throw sparse::InvalidGradient(fmt::format("no trace of rank {} in {}", comm.rank(), dir));
    s = step >= 0 ? static_cast<std::uint64_t>(step) : steps.front();
    if (std::find(steps.begin(), steps.end(), s) == steps.end()) {
      throw sparse::InvalidGradient(
          fmt::format("no trace of step {} of rank {} in {} (steps present: {})", s, comm.rank(),
                      dir, sparse::describe_steps(steps)));
    }
    sparse::TraceHeader h;
    g = sparse::read_trace<Index>(sparse::trace_path(dir, s, comm.rank()), &h);
    if (static_cast<int>(h.world) != comm.size()) {
      throw sparse::InvalidGradient(
          fmt::format("trace {} was written by {} ranks but this run has {}",
                      sparse::trace_path(dir, s, comm.rank()).string(), h.world, comm.size()));
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  comm.agree(problem);
  const auto lo = comm.allreduce_value<std::uint64_t>(g.elements, ReduceOp::min);
  const auto hi = comm.allreduce_value<std::uint64_t>(g.elements, ReduceOp::max);
  if (lo != hi) {
    throw comm::CollectiveError(
        fmt::format("traces disagree on M across ranks (min {}, max {})", lo, hi));
  }
  return g;
}

// Rank 0 gets every rank's gradient (point to point) to compute the characteristics.
template <class Index>
sparse::Characteristics gather_characteristics(Communicator& comm, const SparseGradient<Index>& g) {
  sparse::Characteristics c;
  if (comm.rank() == 0) {
    std::vector<SparseGradient<Index>> all(comm.size());
    all[0] = g;
    for (int r = 1; r < comm.size(); ++r) {
      std::uint64_t nnz = 0;
      comm.recv<std::uint64_t>(std::span(&nnz, 1), r);
      all[r].elements = g.elements;
      all[r].indices.resize(nnz);
      all[r].values.assign(nnz, 1.0f);
      comm.recv<Index>(all[r].indices, r);
    }
    c = sparse::characterize<Index>(all);
  } else {
    const std::uint64_t nnz = g.nnz();
    comm.send<std::uint64_t>(std::span(&nnz, 1), 0);
    comm.send<Index>(g.indices, 0);
  }
  double v[3] = {c.density, c.densification, c.skew};
  comm.broadcast<double>(v, 0);
  c.density = v[0];
  c.densification = v[1];
  c.skew = v[2];
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --breakdown: each phase (time, bytes: max over ranks, median over the timed calls) beside the
// network-only time of its bytes on the probed links; their sum is the scheme's network bound.
nlohmann::json breakdown(const std::vector<sync::PhaseStats>& max_phases, const cost::Network& net,
                         double time_s) {
  nlohmann::json phases = nlohmann::json::array();
  double bound = 0;
  for (const auto& p : max_phases) {
    const double network_s = sync::network_only_time(net, p.bytes_sent, p.bytes_received);
    bound += network_s;
    phases.push_back({{"phase", p.name},
                      {"time_s", p.time_s},
                      {"bytes_sent_max", p.bytes_sent},
                      {"bytes_received_max", p.bytes_received},
                      {"network_s", network_s}});
  }
  return {{"phases", phases},
          {"network_bound_s", bound},
          {"network_ratio", bound > 0 ? time_s / bound : 0.0},
          {"network_latency_s", net.latency_s},
          {"network_bandwidth_bytes_per_s", net.bandwidth_bytes_per_s}};
}

void print_breakdown(const nlohmann::json& r) {
  for (const auto& p : r["phases"]) {
    const double t = p["time_s"], n = p["network_s"];
    std::cout << fmt::format("    {:<12} {:>9.3f} ms  network {:>9.3f} ms  {:>7}  sent {:.3f} MB\n",
                             p["phase"].get<std::string>(), 1e3 * t, 1e3 * n,
                             n > 0 ? fmt::format("{:.2f}x", t / n) : "-",
                             p["bytes_sent_max"].get<double>() / 1e6);
  }
  const double bound = r["network_bound_s"];
  std::cout << fmt::format(
      "    total (median) {:.3f} ms against a network bound of {:.3f} ms: {}\n",
      1e3 * r["time_s"].get<double>(), 1e3 * bound,
      bound > 0 ? fmt::format("{:.2f}x", r["network_ratio"].get<double>()) : "no bytes moved");
}

double imbalance(Communicator& comm, std::uint64_t load) {
  const double mx = comm.allreduce_value<double>(static_cast<double>(load), ReduceOp::max);
  const double sum = comm.allreduce_value<double>(static_cast<double>(load), ReduceOp::sum);
  return sum > 0 ? mx / (sum / comm.size()) : 1.0;
}

// --cpu-cost-record: every rank's samples summed, merged by rank 0 into the table (created if
// absent), refitted and written atomically; a failure is reported on every rank.
void save_cpu_samples(Communicator& comm, const BenchSyncOptions& o, std::uint64_t M,
                      double density) {
  const auto& mine = comm.cpu_charging()->samples;
  std::vector<double> flat;
  for (const auto& s : mine) flat.insert(flat.end(), s.s.begin(), s.s.end());
  comm.allreduce<double>(flat, ReduceOp::sum);
  std::optional<std::string> problem;
  if (comm.rank() == 0) {
    try {
      std::vector<comm::CpuCostSamples> all(mine.size());
      for (std::size_t i = 0; i < all.size(); ++i)
        std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(i * comm::CpuCostSamples::kFields),
                    comm::CpuCostSamples::kFields, all[i].s.begin());
      auto table = std::filesystem::exists(o.cpu_cost_record)
                       ? comm::CpuCostTable::load(o.cpu_cost_record)
                       : comm::CpuCostTable();
      std::string schemes;
      for (const auto& s : o.schemes) schemes += (schemes.empty() ? "" : ",") + s;
      table.merge(all, fmt::format("bench sync: {} ranks, M = {}, density {:.4g}, schemes {}, "
                                   "repeat {}{}",
                                   comm.size(), M, density, schemes, o.repeat,
                                   Communicator::simulated() ? ", simulated" : ""));
      table.save(o.cpu_cost_record);
    } catch (const std::exception& e) {
      problem = fmt::format("--cpu-cost-record {}: {}", o.cpu_cost_record, e.what());
    }
  }
  comm.agree(problem);
  if (comm.rank() == 0 && !o.json)
    std::cout << fmt::format("cpu costs refitted into {}\n", o.cpu_cost_record);
}

// --cpu-cost / --cpu-cost-record: the communicator's charging mode, set on every rank alike
// (each reads the table itself: a bad file fails every rank with the same message).
void set_cpu_charging(Communicator& comm, const BenchSyncOptions& o) {
  if (!o.cpu_cost_file.empty() && !o.cpu_cost_record.empty())
    throw UsageError("--cpu-cost and --cpu-cost-record exclude each other");
  auto charging = std::make_shared<CpuCharging>();
  if (!o.cpu_cost_file.empty()) {
    try {
      charging->table = comm::CpuCostTable::load(o.cpu_cost_file);
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("--cpu-cost: {}", e.what()));
    }
    charging->mode = CpuCharging::Mode::table;
  } else if (!o.cpu_cost_record.empty()) {
    try {
      util::check_writable(o.cpu_cost_record);
      if (std::filesystem::exists(o.cpu_cost_record))
        (void)comm::CpuCostTable::load(o.cpu_cost_record);  // merged into at the end
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("--cpu-cost-record: {}", e.what()));
    }
    charging->samples.resize(comm::cpu_ops().size());
  }
  const auto zero = charging->table.unmeasured(resolve_schemes(o.schemes), o.row_width > 1);
  const bool table = charging->mode == CpuCharging::Mode::table;
  try {
    comm.set_cpu_charging(std::move(charging));
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--cpu-cost {}: {}", o.cpu_cost_file, e.what()));
  }
  if (table && !zero.empty() && comm.rank() == 0) {
    std::string names;
    for (const auto& z : zero) names += (names.empty() ? "" : ", ") + z;
    std::cerr << fmt::format("atoll: warning: {} has no samples of {}: charged 0\n",
                             o.cpu_cost_file, names);
  }
}

// --consume: what a consumer of the result does before the next step, inside the timed call:
// every non-zero read once (entry_fold.h). A result the scheme folded in place is read already;
// any other is folded here, as phase "consume".
volatile std::uint64_t consumed_sum = 0;  // the fold's value is used

template <class Index>
void consume(Communicator& comm, sync::SyncResult<Index>& r) {
  if (r.folded) {
    consumed_sum = consumed_sum + r.folded->sum;
    return;
  }
  const double t0 = comm.wtime();
  consumed_sum = consumed_sum + sync::fold_result(r).sum;
  r.stats.phases.push_back(sync::PhaseStats{"consume", comm.wtime() - t0, 0, 0});
}

// For --verify of a result folded in place: the same scheme (auto: the one it ran) without the
// fold, called once more on the same input into `full`; the fold of its full result must equal
// the one made in place on every rank (the same sums, bit for bit: the schemes are
// deterministic). Collective.
template <class Index>
bool in_place_matches(Communicator& comm, const std::string& name, sync::SchemeOptions options,
                      const SparseGradient<Index>& grad, const sync::SyncResult<Index>& in_place,
                      sync::SyncResult<Index>& full) {
  options.fold_in_place = false;
  auto scheme =
      sync::make_scheme(in_place.stats.chosen.empty() ? name : in_place.stats.chosen, options);
  scheme->prepare(comm);
  scheme->synchronize(comm, grad, full);
  const bool same = sync::fold_result(full) == *in_place.folded;
  return comm.allreduce_value<std::uint64_t>(same ? 0 : 1, ReduceOp::sum) == 0;
}

template <class Index>
int run(Communicator& comm, const BenchSyncOptions& o) {
  const auto names = resolve_schemes(o.schemes);
  SparseGradient<Index> grad = o.trace_dir.empty()
                                   ? sparse::generate_gradient<Index>(o.generator, comm.rank())
                                   : load_trace<Index>(comm, o.trace_dir, o.trace_step);
  if (!o.dump_trace_dir.empty()) {
    std::optional<std::string> problem;
    try {
      sparse::write_trace(sparse::trace_path(o.dump_trace_dir, 0, comm.rank()), grad, comm.rank(),
                          comm.size(), 0);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    comm.agree(problem);
  }
  const auto ch = gather_characteristics(comm, grad);
  const bool integer_values =
      o.trace_dir.empty() && o.generator.values == sparse::ValueKind::integer;

  // The dense reference and its per-element magnitude bound, computed once, outside timing.
  std::vector<float> reference, magnitude;
  if (o.verify) {
    // The reference and the magnitudes: two arrays of M floats per rank (results are checked
    // against them without being made dense).
    comm.agree(util::memory_problem(8 * grad.elements, comm.ranks_on_node(),
                                    fmt::format("--verify at M = {}", grad.elements)));
    reference = grad.to_dense();
    magnitude.assign(grad.elements, 0.0f);
    for (std::size_t k = 0; k < grad.nnz(); ++k)
      magnitude[grad.indices[k]] = std::fabs(grad.values[k]);
    comm.allreduce<float>(reference, ReduceOp::sum);
    comm.allreduce<float>(magnitude, ReduceOp::sum);
  }

  // --row-width: the same gradient as rows (the characteristics and the reference above are the
  // element form's: the same sum).
  if (o.row_width > 1) {
    std::optional<std::string> problem;
    try {
      grad = sparse::group_blocks(grad, o.row_width);
    } catch (const sparse::InvalidGradient& e) {
      problem = fmt::format("--row-width {}: {}", o.row_width, e.what());
    }
    comm.agree(problem);
  }

  // --breakdown: the links' α and b, probed once on this platform, outside timing.
  std::optional<cost::Network> net;
  if (o.breakdown) net = sync::probe_network(comm);

  nlohmann::json rows = nlohmann::json::array();
  bool all_ok = true;
  for (const auto& name : names) {
    sync::SchemeOptions scheme_options;
    scheme_options.threads = o.threads;
    scheme_options.zen_pull_chunks = o.zen_pull_chunks;
    scheme_options.zen_pull_min_block = o.zen_pull_min_block;
    scheme_options.zen_group = o.zen_group;
    scheme_options.zen_group_push = o.zen_group_push;
    scheme_options.row_views = o.row_views;
    scheme_options.fold_in_place = o.consume;
    auto scheme = sync::make_scheme(name, scheme_options);
    sync::SyncResult<Index> last;
    scheme->prepare(comm);  // one-time setup (auto's network probe) is not part of a timed call
    util::set_fault_step(0);
    // The warm-up, then `auto`'s trial calls (each candidate on real calls before it settles),
    // untimed; the trials are reported: a trainer pays them once, in its first steps.
    int explore_calls = 0;
    double explore_s = 0;
    for (int w = 0; w < o.warmup || (last.stats.exploring && explore_calls < 64); ++w) {
      comm.barrier();
      const double t0 = comm.wtime();
      scheme->synchronize(comm, grad, last);
      const double dt = comm.allreduce_value<double>(comm.wtime() - t0, ReduceOp::max);
      if (last.stats.exploring) ++explore_calls, explore_s += dt;
    }
    std::vector<double> times;
    std::vector<std::vector<sync::PhaseStats>> call_phases;  // per timed call, max over ranks
    CpuCharging* charging = comm.cpu_charging();
    if (!o.cpu_cost_record.empty()) charging->mode = CpuCharging::Mode::record;  // timed calls only
    for (int rep = 0; rep < o.repeat; ++rep) {
      util::set_fault_step(rep + 1);  // --inject-fault's STEP
      comm.barrier();
      const double t0 = comm.wtime();
      scheme->synchronize(comm, grad, last);
      if (o.consume) consume(comm, last);
      const double dt = comm.wtime() - t0;
      times.push_back(comm.allreduce_value<double>(dt, ReduceOp::max));
      call_phases.push_back(sync::max_phase_stats(comm, last.stats));  // (after the timing)
    }
    if (!o.cpu_cost_record.empty()) charging->mode = CpuCharging::Mode::measured;
    bool verified = false;
    std::string failure;
    if (o.verify) {
      // A result folded in place is checked through the same scheme's result built in full
      // (in_place_matches).
      const auto* checked = &last;
      std::optional<sync::SyncResult<Index>> full;
      bool fold_matches = true;
      if (last.folded) {
        full.emplace();
        fold_matches = in_place_matches(comm, name, scheme_options, grad, last, *full);
        checked = &*full;
      }
      // Float sums differ from the reference only by rounding: |Δ| ≤ n·ε·Σ|x|; integers: exact.
      const float slack = integer_values ? 0.0f : 4.0f * comm.size() * FLT_EPSILON;
      const auto bad = sync::count_mismatches(*checked, reference, magnitude, slack);
      const auto sum_lo = comm.allreduce_value<std::uint64_t>(checked->checksum(), ReduceOp::min);
      const auto sum_hi = comm.allreduce_value<std::uint64_t>(checked->checksum(), ReduceOp::max);
      const auto bad_all = comm.allreduce_value<std::uint64_t>(bad.count, ReduceOp::sum);
      verified = bad_all == 0 && sum_lo == sum_hi && fold_matches;
      if (!fold_matches) {
        failure = "its fold in place differs from the fold of its full result";
      } else if (bad.count) {
        failure = fmt::format(
            "rank {}: {} elements differ from the dense reference (first at {}: "
            "got {}, expected {})",
            comm.rank(), bad.count, bad.first, bad.got, bad.expected);
      } else if (sum_lo != sum_hi) {
        failure = "results differ across ranks";
      }
      if (!verified) {
        all_ok = false;
        std::cerr << fmt::format("atoll: error: scheme {} failed verification: {}\n", name,
                                 failure.empty() ? "another rank saw a mismatch" : failure);
      }
    }
    const auto& st = last.stats;
    nlohmann::json row{
        {"scheme", name},
        {"ranks", comm.size()},
        {"elements", grad.elements},
        {"index_bits", 8 * sizeof(Index)},
        {"row_width", o.row_width},
        {"row_views", o.row_views},
        {"consume", o.consume},
        {"density", ch.density},
        {"densification", ch.densification},
        {"skew", ch.skew},
        {"zipf",
         o.trace_dir.empty() ? nlohmann::json(o.generator.zipf_exponent) : nlohmann::json()},
        {"source", o.trace_dir.empty() ? "synthetic" : o.trace_dir},
        {"repeat", o.repeat},
        {"time_s", median(times)},
        {"time_min_s", *std::min_element(times.begin(), times.end())},
        {"bytes_sent_max", comm.allreduce_value<std::uint64_t>(st.bytes_sent(), ReduceOp::max)},
        {"bytes_received_max",
         comm.allreduce_value<std::uint64_t>(st.bytes_received(), ReduceOp::max)},
        {"push_imbalance", imbalance(comm, st.push_load_bytes)},
        {"pull_imbalance", imbalance(comm, st.pull_load_bytes)},
        {"verified", verified},
        {"cpu_charge", o.cpu_cost_file.empty() ? "measured" : "table"},
    };
    if (!o.cpu_cost_file.empty()) row["cpu_cost_table"] = o.cpu_cost_file;
    // Each phase's median over the timed calls (its max over ranks in each), shared by both
    // fields: consistent with the median time where calls differ in their phases.
    const auto max_phases = sync::median_phase_stats(call_phases);
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& p : max_phases) phases[p.name] = p.time_s;
    row["phase_time_s"] = phases;
    if (net) row.update(breakdown(max_phases, *net, median(times)));
    if (!st.chosen.empty()) {
      row["chosen"] = st.chosen;
      row["reason"] = st.reason;
      row["predicted_s"] = st.predicted_s;
      row["explore_calls"] = explore_calls;
      row["explore_time_s"] = explore_s;
    }
    rows.push_back(row);
    if (o.json && comm.rank() == 0) std::cout << row.dump() << std::endl;
  }

  if (!o.json && comm.rank() == 0) {
    double base = 0;
    for (const auto& r : rows)
      if (r["scheme"] == "allreduce") base = r["time_s"];
    std::cout << fmt::format(
        "atoll bench sync: {} ranks, M = {}, density {:.4g}%, densification {:.2f}, skew {:.2f}, "
        "{}-bit indices, median of {}\n",
        comm.size(), grad.elements, 100 * ch.density, ch.densification, ch.skew, 8 * sizeof(Index),
        o.repeat);
    std::cout << fmt::format("{:<11} {:>11} {:>10} {:>12} {:>12} {:>7} {:>7} {:>8}\n", "scheme",
                             "time_ms", "speedup", "sent_max_MB", "recv_max_MB", "push_im",
                             "pull_im", "verified");
    for (const auto& r : rows) {
      const double t = r["time_s"];
      std::string sp = base > 0 ? fmt::format("{:.2f}x", base / t) : "-";
      std::cout << fmt::format(
          "{:<11} {:>11.3f} {:>10} {:>12.3f} {:>12.3f} {:>7.3f} {:>7.3f} {:>8}\n",
          r["scheme"].get<std::string>(), 1e3 * t, sp, r["bytes_sent_max"].get<double>() / 1e6,
          r["bytes_received_max"].get<double>() / 1e6, r["push_imbalance"].get<double>(),
          r["pull_imbalance"].get<double>(),
          o.verify ? (r["verified"].get<bool>() ? "yes" : "NO") : "-");
      if (r.contains("chosen")) {
        std::cout << fmt::format(
            "  auto chose {} after {} untimed trial calls ({:.3f} ms in all): {}\n",
            r["chosen"].get<std::string>(), r["explore_calls"].get<int>(),
            1e3 * r["explore_time_s"].get<double>(), r["reason"].get<std::string>());
      }
      if (r.contains("network_bound_s")) print_breakdown(r);
    }
  }
  if (!o.cpu_cost_record.empty()) save_cpu_samples(comm, o, grad.elements, ch.density);
  return all_ok ? 0 : 3;
}

// --inject-fault: only a kill or stop at a scheme's phase means something here.
void arm_fault(const Communicator& comm, const std::string& spec) {
  if (spec.empty()) return;
  const auto faults = train::parse_faults(spec);
  if (!faults.process || faults.corrupt || faults.straggler || faults.stall || faults.nan ||
      spec.find(',') != std::string::npos) {
    throw std::invalid_argument(fmt::format(
        "--inject-fault '{}': bench sync takes one kill:RANK:PHASE:STEP or stop:RANK:PHASE:STEP",
        spec));
  }
  if (Communicator::simulated()) {
    throw std::invalid_argument(
        "--inject-fault kill/stop ends or freezes a process: under SMPI "
        "every rank is one process");
  }
  if (faults.process->rank >= comm.size()) {
    throw std::invalid_argument(fmt::format("--inject-fault {}: rank {} does not exist ({} ranks)",
                                            spec, faults.process->rank, comm.size()));
  }
  faults.arm(comm.rank());
}

}  // namespace

int bench_sync(Communicator& comm, const BenchSyncOptions& o) {
  if (o.repeat < 1) throw UsageError(fmt::format("--repeat must be at least 1 (got {})", o.repeat));
  if (o.warmup < 0) throw UsageError(fmt::format("--warmup must be >= 0 (got {})", o.warmup));
  if (o.consume && !o.cpu_cost_file.empty()) {
    throw UsageError(
        "--consume measures the consumer's reads; --cpu-cost charges from a table that has no "
        "cost for them: use one or the other");
  }
  if (o.row_views && o.row_width < 2)
    throw UsageError("--row-views needs a gradient of rows (--row-width W, W >= 2)");
  if (o.index_bits != 32 && o.index_bits != 64) {
    throw UsageError(fmt::format("--index-bits must be 32 or 64 (got {})", o.index_bits));
  }
  try {
    sparse::validate(o.generator);
    resolve_schemes(o.schemes);
    comm::resolve_threads(o.threads, comm.ranks_on_node());  // at most this machine's cores
    arm_fault(comm, o.inject_fault);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (o.trace_dir.empty() && o.index_bits == 32 &&
      o.generator.elements > (std::uint64_t{1} << 32)) {
    throw UsageError(fmt::format("--elements {} needs --index-bits 64", o.generator.elements));
  }
  set_cpu_charging(comm, o);
  return o.index_bits == 32 ? run<std::uint32_t>(comm, o) : run<std::uint64_t>(comm, o);
}

}  // namespace atl::cli
