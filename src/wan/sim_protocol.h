// JSON exchanged between simulate() and atoll-wan-sim-engine over the child's stdin/stdout.
#pragma once

#include <nlohmann/json.hpp>

#include "atoll/wan/simulator.h"

namespace atl::wan::sim_protocol {

struct Request {
  Topology topology;
  std::vector<ResolvedRound> period;
  SimulationOptions options;
};

nlohmann::json request_to_json(const Topology& topology, const std::vector<ResolvedRound>& period,
                               const SimulationOptions& options);
Request request_from_json(const nlohmann::json& j);
nlohmann::json result_to_json(const SimulationResult& result);
SimulationResult result_from_json(const nlohmann::json& j);

// The engine's side (src/wan/simgrid_engine.cpp, linked only into atoll-wan-sim-engine): the
// simulation in this process; SimGrid allows one call per process.
SimulationResult simulate_in_process(const Topology& topology,
                                     const std::vector<ResolvedRound>& period,
                                     const SimulationOptions& options);

}  // namespace atl::wan::sim_protocol
