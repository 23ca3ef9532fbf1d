// Shared by `atoll plan` and `atoll wan-sim` (defined in plan.cpp).
#pragma once

#include <optional>

#include "atoll/cli/commands.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/schedule_file.h"

namespace atl::cli {

// The payload when --payload is not given (and, for wan-sim, no schedule file names one).
inline constexpr double kDefaultPayloadBytes = 100e6;

// UsageError unless every given flag is in range: payload, FPGA memory, egress and ingress
// positive and finite, epsilon in (0, 1), compute time >= 0.
void check_plan_flags(const PlanCommandOptions& options);

// The topology of the plan options (default: data/cities-9.csv), with the FPGA memory and the
// egress/ingress flags, where given, applied to every site.
wan::Topology load_wan_topology(const PlanCommandOptions& options,
                                std::optional<double> fpga_memory_bytes);

// The planner's best schedule (exhaustive up to 10 sites, heuristic beyond), named "planned".
// --chunk-bytes, or the default aggregation unit for the topology's FPGA memory.
std::uint64_t aggregation_unit(const PlanCommandOptions& options, const wan::Topology& topology,
                               double payload_bytes);

wan::EvaluatedSchedule best_plan(const wan::Topology& topology, const wan::PlanOptions& options);

wan::ScheduleFile to_schedule_file(const wan::Topology& topology,
                                   const wan::EvaluatedSchedule& schedule, double payload_bytes);

}  // namespace atl::cli
