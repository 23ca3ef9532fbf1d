// The trainer's LayerHooks: what happens at each model unit's boundaries in a training step.
// - EDiT's layer-wise synchronization: before a unit's forward, the pending sync work for it
//   (LocalSgd::before_unit, timed as the step's "outer_sync" phase); after each unit, a chance for
//   posted transfers to progress (Open MPI moves them only inside MPI calls).
// - Compute charged where it happens under simulation: with --sim-compute-s S, unit u's forward
//   is charged S/3·w_u and its backward 2S/3·w_u of simulated time at its end (w_u: its share of
//   the dense parameters, which sets its matrix-multiply work; the embedding lookup is free), so a
//   transfer posted before a unit's compute really runs during it. Without S, SMPI charges the
//   measured forward compute at the next MPI call, which the sync work at each boundary provides,
//   and each backward unit its measured host duration.
// - DDP's overlap: after each unit's backward (charged), the step's after_backward(u) posts that
//   unit's dense gradient sum, so under SMPI it travels during the backward of the units below.
// - --timeline: each unit's forward and backward interval on this rank.
// The backward pass runs inside LibTorch's autograd engine, whose thread-local state must not see
// another simulated rank: SMPI runs all ranks in one thread and switches between them inside
// every MPI call, so the backward hooks only note the host time; end_step() charges the backward
// units one by one afterwards (nothing waits during the backward, so its simulated time is the
// same, and what is posted after a unit's charge travels during the next units' charges) and
// places them on the timeline by their charge (fixed) or host duration (measured). Under Open MPI
// the posts therefore come after the whole backward pass (LibTorch's backward may run hooks on its
// own threads; atoll's MPI calls stay on the main thread): there they overlap the embedding's sync
// and the steps after it, not the backward pass.
// Private to src/train.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "atoll/comm/communicator.h"
#include "engine.h"
#include "model.h"
#include "step_timer.h"
#include "timeline.h"

namespace atl::train {

// Each unit's share of the model's compute: its dense parameters over all dense parameters.
std::vector<double> unit_compute_weights(const Engine& engine, int layers);

class LayerEvents : public LayerHooks {
 public:
  LayerEvents(comm::Communicator& comm, std::vector<double> unit_weights, double sim_compute_s,
              Timeline* timeline);

  struct StepSync {
    std::function<void(int)> before_unit;  // empty: nothing to do
    std::function<void()> progress;
    // The 2-D mesh with sharded parameters: unit u's parameters gathered (after before_unit),
    // timed as the phase "param_gather".
    std::function<void(int)> gather_unit;
    // After unit u's backward (timed as the phase "dense_sync"): DDP's overlapped dense sums.
    std::function<void(int)> after_backward;
  };
  // Starts a step's model work (with a fixed compute charge: stops measuring).
  void begin_step(int step, StepSync sync, StepTimer* timer);
  void begin_backward();
  // After loss.backward(): the units whose backward ended with it (1 and 0); with a fixed
  // compute charge, measuring resumes.
  void end_step();

  void forward_begin(int unit) override;
  void forward_end(int unit) override;
  void backward_end(int unit) override;

 private:
  void leave(double charge);  // fixed compute: charge it, measure again (MPI calls may follow)
  void enter();               // fixed compute: stop measuring
  double now() const;

  comm::Communicator& comm_;
  std::vector<double> weights_;
  double sim_compute_s_;
  Timeline* timeline_;
  int step_ = 0;
  StepSync sync_;
  StepTimer* timer_ = nullptr;
  std::vector<double> forward_begin_;
  std::vector<double> backward_host_end_;  // host seconds; < 0: not ended yet
  double backward_begin_ = 0, backward_host_begin_ = 0;
};

}  // namespace atl::train
