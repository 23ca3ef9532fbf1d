// Named phases of one training step on the engine's clock (wall time under Open MPI, simulated
// time under SMPI): start("model") ... start("sync") ... stop(). A phase started twice in a step
// adds up. Free of LibTorch. Private to src/train.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace atl::train {

class StepTimer {
 public:
  // `clock`: seconds, e.g. [&comm] { return comm.wtime(); }.
  explicit StepTimer(std::function<double()> clock) : clock_(std::move(clock)) {}
  // Ends the running phase (if any) and starts `phase`.
  void start(const std::string& phase);
  // Ends the running phase.
  void stop();
  // Seconds spent in `phase` this step (0 if it did not run).
  double seconds(const std::string& phase) const;
  // All phases of this step, in first-start order.
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  double total() const;
  // Forgets this step's phases.
  void reset();

 private:
  std::function<double()> clock_;
  std::vector<std::pair<std::string, double>> phases_;
  std::size_t running_ = 0;  // index + 1 of the running phase; 0 = none
  double started_ = 0;
};

}  // namespace atl::train
