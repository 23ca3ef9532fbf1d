// Worker threads for a rank's computation between MPI calls (issue 18 item 2), with their time
// charged under simulation.
//
//   comm::run_parallel(comm, threads, tasks, [&](std::size_t t) { ...no MPI call... });
//
// Under SMPI a rank's computation is charged by SimGrid's automatic benchmarking, which times the
// CPU time of the thread that runs the rank (CLOCK_THREAD_CPUTIME_ID): work on helper threads,
// and the caller's wait for it, would go uncharged (tests/mpi/parallel_charge_test.cpp shows
// both). A parallel section is therefore charged its wall time, no less: the caller's own CPU
// time as usual, plus the rest of the section's wall time as a fixed delay. In the cost-table mode
// (ChargedWork, Mode::table) the table's cost is the charge and nothing is added.
#pragma once

#include <cstddef>
#include <functional>

#include "atoll/comm/communicator.h"

namespace atl::comm {

// This machine's cores (std::thread::hardware_concurrency, at least 1).
unsigned machine_cores();

// Threads per rank: `requested`, or for 0 the cores of this node shared by the ranks on it (at
// least 1; under SMPI every simulated rank is on the one real node, so 1 unless requested).
// Throws std::invalid_argument naming both numbers when requested exceeds machine_cores().
unsigned resolve_threads(unsigned requested, int ranks_on_node);

// Runs task(0), ..., task(tasks - 1) on up to `threads` threads (OpenMP; the caller is one of
// them) and returns when every task has ended; then rethrows the first exception a task threw.
// Tasks must not call MPI. threads <= 1 runs them in order on the caller, charged as usual.
void run_parallel(Communicator& comm, unsigned threads, std::size_t tasks,
                  const std::function<void(std::size_t)>& task);

}  // namespace atl::comm
