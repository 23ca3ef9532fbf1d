// Simulation only (atoll-smpi): models of the namespace testbed that a platform of separate
// machines lacks, for checking the simulator against it (src/comm/smpi_testbed_models.cpp,
// docs/results/testbed.md). The platform says what applies: the cluster property
// atoll_shared_cores=C (scripts/make-platform --shared-cores C) makes all hosts share C cores.
// Throws std::invalid_argument, on every rank alike, for a bad value or an unfit platform.
// Call on every rank before any computation, then synchronize (the models are process-wide).
#pragma once

namespace atl::comm {
void install_testbed_models(int rank, int ranks);
}
