#include "run_plan.h"

namespace atl::train {

namespace {

// A multiple of `every` in (from, to].
bool crosses(std::int64_t from, std::int64_t to, std::int64_t every) {
  return every > 0 && from / every < to / every;
}

}  // namespace

RunPlan::RunPlan(const TrainConfig& c, int world, std::int64_t trained)
    : eval_every_(c.eval_every),
      checkpoint_every_(c.checkpoint_every),
      steps_(c.steps),
      world_(world),
      checkpoints_(!c.out.empty()),
      budget_(static_cast<std::int64_t>(c.steps) * world),
      trained_(trained) {}

StepPlan RunPlan::at_step(int step) const {
  StepPlan p;
  p.last = step == steps_;
  p.eval = eval_every_ > 0 && (step % eval_every_ == 0 || p.last);
  p.checkpoint =
      checkpoints_ && ((checkpoint_every_ > 0 && step % checkpoint_every_ == 0) || p.last);
  return p;
}

StepPlan RunPlan::at_round(std::int64_t trained) {
  StepPlan p;
  p.last = trained >= budget_;
  p.eval =
      eval_every_ > 0 && (crosses(trained_, trained, std::int64_t{eval_every_} * world_) || p.last);
  p.checkpoint =
      checkpoints_ && ((checkpoint_every_ > 0 &&
                        crosses(trained_, trained, std::int64_t{checkpoint_every_} * world_)) ||
                       p.last);
  trained_ = trained;
  return p;
}

}  // namespace atl::train
