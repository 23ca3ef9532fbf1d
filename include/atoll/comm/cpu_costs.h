// Charging computation from a cost table instead of measuring it (issue 18 item 8).
//
// Under SMPI the default charges each rank the real seconds it computed between MPI calls, so a
// simulated time swings with this machine's load. With a table (`--cpu-cost FILE`), every
// section of a scheme's computation marked with a ChargedWork (charged_work.h) is charged
//   ns_per_call + ns_per_item * items + ns_per_byte * bytes
// for its operation, and nothing else is measured: two runs give the same simulated time.
// The table is calibrated once on the machine by runs that measure those same sections
// (`--cpu-cost-record FILE`): each section adds (items, bytes, seconds) to its operation's sums,
// which add up across ranks and runs, and the costs are their non-negative least-squares fit.
// No MPI here; the Communicator applies the mode (communicator.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace atl::comm {

// One operation's cost model.
struct CpuCost {
  double ns_per_call = 0;
  double ns_per_item = 0;
  double ns_per_byte = 0;
  double seconds(double items, double bytes) const {
    return 1e-9 * (ns_per_call + ns_per_item * items + ns_per_byte * bytes);
  }
};

// The sufficient statistics of one operation's measured samples (x = items, b = bytes,
// y = seconds): they add up, so ranks and calibration runs merge by summing. (A fit on relative
// errors, weights 1/y², was tried: it ranked zen_ef ahead of zen at 25 Gbit/s, against measured
// time; docs/results/cpu-costs.md.)
struct CpuCostSamples {
  static constexpr std::size_t kFields = 10;
  std::array<double, kFields> s{};  // n, Σx, Σb, Σy, Σxx, Σxb, Σbb, Σxy, Σby, Σyy
  void add(double items, double bytes, double seconds);
  void merge(const CpuCostSamples& other);
  bool empty() const { return s[0] == 0; }
};

// The least-squares cost with every coefficient >= 0: of the fits over each subset of
// {call, item, byte} whose coefficients all come out non-negative, the one of least residual.
// No samples: all zero.
CpuCost fit_cpu_cost(const CpuCostSamples& samples);

// Every operation a ChargedWork names ("scheme.step"), in a fixed order: ids index tables and
// the per-rank sums (one allreduce for all of them).
const std::vector<std::string>& cpu_ops();
// The id of a listed operation; std::logic_error for any other name (a programming error).
std::size_t cpu_op_id(std::string_view op);

// A calibrated table: per operation its cost and the samples it was fitted to.
struct CpuCostTable {
  std::vector<CpuCost> costs;             // by op id
  std::vector<CpuCostSamples> samples;    // by op id
  std::vector<std::string> calibrations;  // one line per recording run merged in (its command)

  CpuCostTable();  // every op, no samples, zero cost
  // Adds samples (by op id) and refits every operation.
  void merge(const std::vector<CpuCostSamples>& more, const std::string& calibration);
  // Operations charged at zero because no calibration run measured them.
  std::vector<std::string> unmeasured() const;
  // Those of them a run of `schemes` can charge: each scheme's own ("zen.decode" for zen), Zen's
  // row path (zen_rows.*) when `rows` and a Zen variant is among them; all of them with auto
  // (it may run any scheme).
  std::vector<std::string> unmeasured(const std::vector<std::string>& schemes, bool rows) const;

  // JSON {"format": "atoll-cpu-costs", "version": 1, "calibrations": [...], "ops": {name:
  // {"ns_per_call", "ns_per_item", "ns_per_byte", "samples": [10 sums]}}}. load() refuses, naming
  // the file and the field, anything else: another format or version, an operation it does not
  // know or one missing, a cost that is negative or not finite, samples of the wrong length.
  static CpuCostTable load(const std::filesystem::path& file);
  // The same from the file's bytes (`file` names it in errors).
  static CpuCostTable parse(std::span<const std::uint8_t> bytes, const std::string& file);
  void save(const std::filesystem::path& file) const;  // atomically
};

// A communicator's charging mode and state (one per rank, shared with its sub-communicators).
struct CpuCharging {
  enum class Mode { measured, record, table };
  Mode mode = Mode::measured;
  CpuCostTable table;                   // mode table: the costs charged
  std::vector<CpuCostSamples> samples;  // mode record: this rank's samples, by op id
  int depth = 0;                        // open ChargedWork sections (they must not nest)
};

}  // namespace atl::comm
