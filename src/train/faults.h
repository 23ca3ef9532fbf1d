// --inject-fault (experiments): faults a run injects on purpose, comma-separated specs.
//   corrupt:RANK:STEP:SCALE  worker RANK's pseudo-gradient is scaled by SCALE (nan: made NaN) at
//                            the first synchronization at or after STEP (local SGD only;
//                            across sites: site RANK's Δ at its first meeting in a clique)
//   straggler:RANK:FACTOR    rank RANK's compute takes FACTOR (>= 1) times as long, every step
//   stall:PROB:SECONDS       each rank, each step, stalls SECONDS with probability PROB (seeded
//                            by --seed, the rank and the step: the same stalls in every run)
//   stop:RANK:STEP           rank RANK stops itself (SIGSTOP) after step STEP's forward and
//                            backward pass, as a frozen or unreachable process would (mpirun
//                            only: the collective watchdog's test, --comm-timeout)
//   stop:RANK:PHASE:STEP     ... at PHASE of step STEP (util/fault_point.h: a scheme's phase
//   kill:RANK:PHASE:STEP     such as push, aggregate, pull; backward, dense_sync, outer_sync,
//                            checkpoint); kill: SIGKILL, a dead process (the kill matrix)
//   nan:RANK:STEP            rank RANK's gradient of the first dense parameter gets a NaN after
//                            step STEP's backward pass (the --nonfinite test)
// A slowdown is spent right after the step's forward and backward pass (before a data-parallel
// step's gradient synchronization, so the others wait for it there): charged to the simulated
// clock under SMPI, slept under mpirun. The straggler's extra time is (FACTOR − 1) times the
// step's model time: --sim-compute-s when set, else the measured forward and backward.
// Private to src/train; free of LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/util/fault_point.h"

namespace atl::train {

struct FaultInjection {  // corrupt:RANK:STEP:SCALE
  int rank = 0;
  int step = 0;
  double scale = 1;
};
struct Straggler {
  int rank = 0;
  double factor = 1;
};
struct Stall {
  double probability = 0;
  double seconds = 0;
};

struct Stop {
  int rank = 0;
  int step = 0;
};
struct ProcessFault {  // kill:... or stop:...
  util::FaultSignal signal = util::FaultSignal::stop;
  int rank = 0;
  std::string phase = "backward";
  int step = 0;
};
// The phases a kill or stop may name.
const std::vector<std::string>& fault_phases();

struct Faults {
  std::optional<FaultInjection> corrupt;
  std::optional<ProcessFault> process;  // one kill or stop
  std::optional<Stop> nan;              // nan:RANK:STEP
  std::optional<Straggler> straggler;
  std::optional<Stall> stall;
  int largest_rank() const;  // of corrupt/straggler, -1 if none names a rank
  // Arms this process's fault point when the kill or stop names `rank` (util/fault_point.h).
  void arm(int rank) const;
};

// Empty spec: no faults. Throws std::invalid_argument naming the problem (unknown form, bad
// number, a kind given twice).
Faults parse_faults(const std::string& spec);

// The slowdowns of one rank.
class Slowdown {
 public:
  Slowdown(const Faults& faults, int rank, std::uint64_t seed);
  // Extra seconds for `step` whose model work took `model_s`: the straggler's share plus a stall.
  double extra_seconds(int step, double model_s) const;
  // Spends extra_seconds(step, model_s) (comm.delay) and returns it.
  double apply(comm::Communicator& comm, int step, double model_s) const;
  // True when this rank's gradient gets a NaN at `step` (nan:RANK:STEP).
  bool poisons(int step) const { return step == nan_step_; }

 private:
  double factor_ = 1;  // this rank's straggler factor
  int nan_step_ = 0;   // this rank's NaN gradient (0: none)
  Stall stall_;
  int rank_;
  std::uint64_t seed_;
};

}  // namespace atl::train
