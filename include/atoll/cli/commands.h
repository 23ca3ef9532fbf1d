// Subcommands of build/atoll (and build/atoll-smpi). main.cpp parses flags into these options and
// calls the command; commands take the communicator explicitly and print on rank 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sparse/generator.h"

namespace atl::cli {

// A problem with the user's input; main prints "atoll: error: <message>" and exits with 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BenchSyncOptions {
  std::vector<std::string> schemes{"all"};
  sparse::GeneratorOptions generator{std::uint64_t{1} << 24, 0.01, 1.1, 1,
                                     sparse::ValueKind::normal};
  int index_bits = 32;
  int repeat = 5;
  int warmup = 1;
  std::string trace_dir;         // if set, gradients come from this trace instead of the generator
  std::int64_t trace_step = -1;  // -1: the first step present
  std::string dump_trace_dir;    // if set, each rank writes its gradient there as step 0
  bool verify = false;
  bool json = false;
  // Each phase's time beside the network-only time of its bytes (α and b probed on the links),
  // and the scheme's total against that bound (JSON: phases, network_bound_s, network_ratio).
  bool breakdown = false;
  // kill:RANK:PHASE:STEP or stop:RANK:PHASE:STEP: rank RANK raises SIGKILL / SIGSTOP at the
  // scheme phase PHASE of timed repetition STEP (1-based; the kill matrix, docs/reliability.md).
  std::string inject_fault;
  // Simulated CPU time (cpu_costs.h): charge the schemes' computation from this table (SMPI
  // only) instead of measuring it; or measure it and merge the samples into this table.
  std::string cpu_cost_file;
  std::string cpu_cost_record;
  // Worker threads per rank for the schemes that use them (Zen's decode); 0: the node's cores
  // shared by the ranks on it (1 under SMPI). At most this machine's cores.
  unsigned threads = 0;
  // Zen's pull chunks at most, and the smallest average block that adds one
  // (SchemeOptions::zen_pull_chunks, zen_pull_min_block).
  std::uint32_t zen_pull_chunks = 8;
  std::uint64_t zen_pull_min_block = 32768;
  std::uint32_t zen_group = 0;  // SchemeOptions::zen_group
  bool zen_group_push = true;   // SchemeOptions::zen_group_push
  // > 1: the gradient as rows of this many values (SparseGradient::width; an embedding's rows):
  // every block with a non-zero becomes a row, its other values explicit zeros. Zen's variants
  // carry rows (one index each), the other schemes elements. M must be a multiple.
  std::uint32_t row_width = 1;
  // With rows: Zen's variants leave them in the pulled blocks (SchemeOptions::row_views), as
  // for the trainer; the result is then read where it lies (--verify reads it there).
  bool row_views = false;
  bool consume = false;  // --consume: time until every non-zero of the result has been read
};
int bench_sync(comm::Communicator& comm, const BenchSyncOptions& options);

struct AnalyzeOptions {
  std::string trace_dir;
  std::int64_t trace_step = -1;
  int ranks = 4;  // synthetic: number of workers to generate
  sparse::GeneratorOptions generator{std::uint64_t{1} << 24, 0.01, 1.1, 1,
                                     sparse::ValueKind::normal};
  bool json = false;
};
int analyze(comm::Communicator& comm, const AnalyzeOptions& options);

struct PlanCommandOptions {
  std::string topology_file;            // empty: the nine-city default shipped in data/
  std::string latency_matrix_file;      // optional measured one-way latencies (ms)
  std::string latency_model = "fiber";  // fiber | affine (wan::LatencyModelKind)
  std::string latency_samples_file;     // affine: pings to fit (empty: data/pings-2011.csv)
  // Flags absent when not given (then: the schedule file's payload for wan-sim --schedule, else
  // 1e8; the topology's memory and bandwidths, else its defaults). Given, each must be positive.
  std::optional<double> payload_bytes;
  std::optional<double> fpga_memory_bytes;
  std::optional<double> egress_gbps, ingress_gbps;
  double epsilon = 1e-3;          // in (0, 1)
  double compute_s = 0;           // >= 0
  std::uint64_t chunk_bytes = 0;  // FPGA aggregation unit; 0: wan::default_chunk_bytes(topology)
  std::string sweep;              // "" or "fpga-memory"
  bool json = false;
  std::string schedule_out;  // wan-sim: if set, write the planned schedule here (schedule_file.h)
};
int plan(comm::Communicator& comm, const PlanCommandOptions& options);

// wan-sim: `atoll wan-sim` simulates a schedule file, or every schedule the planner reports,
// in SimGrid and checks the round model against it (src/cli/wan_sim.cpp, docs/wan.md).
struct WanSimOptions {
  PlanCommandOptions plan;    // topology, bandwidth, memory, payload, epsilon
  std::string schedule_file;  // simulate this schedule ...
  bool from_plan = false;     // ... or plan, then simulate every schedule the planner reports
  std::optional<std::size_t> rounds;  // absent: the schedule's rounds to consensus, else one period
  double tolerance = 0.10;            // largest allowed |simulated / model - 1| per round, > 0
  bool no_throttle = false;         // multicast senders at line rate (to show the buffers overflow)
  bool flow_level_unicast = false;  // one SimGrid flow per unicast pair (optimistic; simulator.h)
};
int wan_sim(comm::Communicator& comm, const WanSimOptions& options);

// wan-platform: `atoll wan-platform` writes a SimGrid platform for SMPI runs across WAN sites,
// with the topology's latencies (src/cli/wan_platform.cpp, atoll/wan/smpi_platform.h).
struct WanPlatformOptions {
  std::string topology_file;            // empty: data/cities-9.csv
  std::string latency_matrix_file;      // optional measured one-way latencies (ms)
  std::string sites;                    // "": all; "N": the first N in file order; "A,B,...": these
  std::string bandwidth;                // each site's access link, SimGrid units ("1Gbps")
  std::string name;                     // the zone's id; empty: --out's stem, else "wan"
  std::optional<std::string> smpi_cfg;  // absent: wan::kWanSmpiCollectives; "" writes none
  std::string out;                      // empty: standard output
  int node_cores = 1;                   // cores per site's host (wan::SmpiPlatformOptions)
};
int wan_platform(comm::Communicator& comm, const WanPlatformOptions& options);

}  // namespace atl::cli
