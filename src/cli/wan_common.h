// Shared by `atoll plan` and `atoll wan-sim` (defined in plan.cpp): flag checks and the
// translation of their flags into the wan library's options (atoll/wan/topology.h, planner.h).
#pragma once

#include <optional>

#include "atoll/cli/commands.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/topology.h"

namespace atl::cli {

// The payload when --payload is not given (and, for wan-sim, no schedule file names one).
inline constexpr double kDefaultPayloadBytes = wan::kDefaultPayloadBytes;

// UsageError unless every given flag is in range: payload, FPGA memory, egress and ingress
// positive and finite, epsilon in (0, 1), compute time >= 0.
void check_plan_flags(const PlanCommandOptions& options);

// --topology, --latency-matrix, --egress-gbps, --ingress-gbps and the given FPGA memory (the
// --fpga-memory flag, or one point of the sweep) as wan::load_topology's options.
wan::TopologyOptions topology_options(const PlanCommandOptions& options,
                                      std::optional<double> fpga_memory_bytes);

// --payload (or `payload_bytes`), --chunk-bytes, --compute-s, --epsilon as a wan::PlanRequest.
wan::PlanRequest plan_request(const PlanCommandOptions& options, double payload_bytes);

}  // namespace atl::cli
