// Simulation only (atoll-smpi): models of the namespace testbed that a platform of separate
// machines lacks, for checking the simulator against it (src/comm/smpi_testbed_models.cpp,
// docs/results/testbed.md). Off unless set: ATOLL_SIM_SHARED_CORES=C (all hosts share C cores;
// needs a platform from scripts/make-platform --shared-cores C).
// Throws std::invalid_argument, on every rank alike, for a bad value or an unfit platform.
#pragma once

namespace atl::comm {
void install_testbed_models(int rank, int ranks);
}
