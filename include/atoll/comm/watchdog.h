// The collective watchdog (docs/reliability.md): MPI has no timeouts, so a peer that is stopped,
// dead or unreachable leaves the other ranks blocked in a collective forever. With a timeout set,
// every blocking communicator operation marks this rank as inside it (two relaxed atomic stores),
// and a thread that wakes about ten times per timeout (at most once a second) checks the mark; an
// operation that has not completed in time is named on standard error (operation, communicator,
// seconds waited, rank) and the process exits with kWatchdogExitCode (std::_Exit: no MPI call from
// the watchdog thread), on which mpirun ends the whole job. Under SMPI it is off: simulated time
// cannot pass on a stopped peer, and SimGrid reports a deadlock itself.
#pragma once

namespace atl::comm {

inline constexpr int kWatchdogExitCode = 86;
inline constexpr double kDefaultCommTimeout = 300;

// Seconds one operation may take on this rank (0: off). The first positive value starts the
// watchdog thread; later calls change the limit. std::invalid_argument if negative or not finite.
void set_comm_timeout(double seconds);
double comm_timeout();

// Marks the calling thread as inside a communicator operation while it lives (nested marks: the
// outermost one counts). `operation` must be a string literal.
class WatchedCall {
 public:
  WatchedCall(const char* operation, int rank, int size, bool world);
  ~WatchedCall();
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;

 private:
  bool counted_ = false, outermost_ = false;
};

}  // namespace atl::comm
