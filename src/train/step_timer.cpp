#include "step_timer.h"

namespace atl::train {

void StepTimer::start(const std::string& phase) {
  stop();
  std::size_t k = 0;
  while (k < phases_.size() && phases_[k].first != phase) ++k;
  if (k == phases_.size()) phases_.emplace_back(phase, 0.0);
  running_ = k + 1;
  started_ = clock_();
}

void StepTimer::stop() {
  if (running_ == 0) return;
  phases_[running_ - 1].second += clock_() - started_;
  running_ = 0;
}

double StepTimer::seconds(const std::string& phase) const {
  for (const auto& [name, s] : phases_)
    if (name == phase) return s;
  return 0;
}

double StepTimer::total() const {
  double t = 0;
  for (const auto& p : phases_) t += p.second;
  return t;
}

void StepTimer::reset() {
  phases_.clear();
  running_ = 0;
}

}  // namespace atl::train
