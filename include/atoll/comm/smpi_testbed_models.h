// Simulation only (atoll-smpi): models of the namespace testbed's artefacts, for checking the
// simulator against it (src/comm/smpi_testbed_models.cpp, docs/results/testbed.md). Each is off
// unless its environment variable is set:
// - ATOLL_SIM_SHARED_CORES=C: all hosts share C cores (needs scripts/make-platform --shared-cores C);
// - ATOLL_SIM_TBF=BURST_BYTES,UNSHAPED_BIT_S: each host's link is shaped by a token bucket of
//   BURST_BYTES (refilled at the link's bandwidth), through which a message leaves at
//   UNSHAPED_BIT_S while the bucket holds tokens, as Linux tbf does.
// Throws std::invalid_argument, on every rank alike, for a bad value or an unfit platform.
#pragma once

namespace atl::comm {
void install_testbed_models(int rank, int ranks);
}
