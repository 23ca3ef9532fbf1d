// Shared by `atoll plan` and `atoll wan-sim` (defined in plan.cpp).
#pragma once

#include "atoll/cli/commands.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/schedule_file.h"

namespace atl::cli {

// The topology of the plan options (default: data/cities-9.csv), with the FPGA memory (if >= 0)
// and the egress/ingress flags (if > 0) applied to every site.
wan::Topology load_wan_topology(const PlanCommandOptions& options, double fpga_memory_bytes);

// The planner's best schedule (exhaustive up to 10 sites, heuristic beyond), named "planned".
// --chunk-bytes, or the default aggregation unit for the topology's FPGA memory.
std::uint64_t aggregation_unit(const PlanCommandOptions& options, const wan::Topology& topology,
                               double payload_bytes);

wan::EvaluatedSchedule best_plan(const wan::Topology& topology, const wan::PlanOptions& options);

wan::ScheduleFile to_schedule_file(const wan::Topology& topology,
                                   const wan::EvaluatedSchedule& schedule, double payload_bytes);

}  // namespace atl::cli
