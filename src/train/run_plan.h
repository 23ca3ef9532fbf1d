// When a step validates, writes a checkpoint and ends the run.
// ddp, diloco, edit (and aedit's data-parallel warm-up steps): by the step number, as the flags
// say (--eval-every, --checkpoint-every, --steps; the last step does all three).
// aedit: workers' step counts differ, so only at a synchronized round, by the batches all workers
// have trained (the sum of their step counts, which the round's allgather gives every worker):
// validation when it crosses a multiple of eval-every·world, a checkpoint at a multiple of
// checkpoint-every·world, and the end at the first round where it reaches steps·world (the token
// budget of a data-parallel run of --steps steps). Private to src/train; free of LibTorch.
#pragma once

#include <cstdint>

#include "atoll/train/trainer.h"

namespace atl::train {

struct StepPlan {
  bool eval = false, checkpoint = false, last = false;
};

class RunPlan {
 public:
  // `trained`: batches all workers had trained when this run began (0, or the resumed total).
  RunPlan(const TrainConfig& config, int world, std::int64_t trained);
  StepPlan at_step(int step) const;
  // aedit: a synchronized round after which all workers have trained `trained` batches.
  StepPlan at_round(std::int64_t trained);
  // aedit: a resumed run whose budget is already spent.
  bool done() const { return trained_ >= budget_; }

 private:
  int eval_every_, checkpoint_every_, steps_, world_;
  bool checkpoints_;
  std::int64_t budget_, trained_;
};

}  // namespace atl::train
