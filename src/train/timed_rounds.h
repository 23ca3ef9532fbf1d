// A-EDiT's time-based synchronization rounds (--strategy aedit; notes/localsgd.md, EDiT item 4).
//
// A round is due when --sync-seconds T of training time have passed since the previous round
// ended (or local training began). That clock is shared: a round's collectives end at about the
// same time on every worker, so every worker measures the same interval from there (MPI_Wtime
// differences, simulated time under SMPI; validation and checkpoints pause it). A worker looks at
// the clock after each local step, so a fast worker takes more local steps than a slow one before
// a round, and waits at the round for a slow one at most the step that one has in progress. No
// collective runs between rounds; rounds are collectives every worker joins in the same order.
//
// A round opens with one allgather of each worker's (local steps since its last sync, local
// steps in all). If all workers together took fewer than --min-round-steps steps since the last
// sync, the round is skipped (no sync; the steps count toward the next one); otherwise the caller
// synchronizes. The time is counted from the end of the previous round rather than at fixed
// multiples k·T of one start: with fixed multiples each round's own duration (and a straggler's
// lateness) would shift the next round earlier, so T = (H − ½) step times would not give H steps.
// Private to src/train; free of LibTorch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::train {

class TimedRounds {
 public:
  // period_s > 0 and min_round_steps >= 0 (checked by check_config).
  TimedRounds(double period_s, std::int64_t min_round_steps);

  // Starts the clock at `now` (the first local step of this process; after a resume the saved
  // time since the last round carries on).
  void start(double now);
  bool running() const { return running_; }
  // Validation and checkpoints do not count as training time.
  void pause(double now);
  void resume(double now);

  // Seconds of training time since the previous round ended.
  double elapsed(double now) const;
  // After a local step: counts it; true when a round is due.
  bool step_done(double now);

  struct Round {
    std::vector<std::int64_t> steps;        // per worker: local steps since its last sync
    std::vector<std::int64_t> local_steps;  // per worker: local steps in all (its step counter)
    bool skipped = false;
    std::int64_t steps_since_sync() const;  // Σ steps
    std::int64_t total_steps() const;       // Σ local_steps: batches trained by all workers
  };
  // Collective over the sync group: opens a round (the allgather); `local_step` is this worker's
  // step counter.
  Round join(comm::Communicator& comm, int local_step);
  // After the round's sync (or its skip): the clock restarts at `now`; a sync clears the steps.
  void end_round(double now, bool synced);

  std::int64_t rounds() const { return rounds_; }
  std::int64_t skipped() const { return skipped_; }

  // [time since the last round, steps since the last sync, rounds, skipped]; load() refuses a
  // record of another length or with negative/non-finite values (std::invalid_argument).
  std::vector<double> save(double now) const;
  void load(std::span<const double> state);

 private:
  double period_;
  std::int64_t min_round_steps_;
  bool running_ = false, paused_ = false;
  double mark_ = 0;  // the clock's zero on the engine's clock (shifted by pauses)
  double paused_at_ = 0;
  double carried_ = 0;  // loaded: time since the last round when the checkpoint was written
  std::int64_t since_sync_ = 0, rounds_ = 0, skipped_ = 0;
};

}  // namespace atl::train
