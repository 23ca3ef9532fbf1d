#include "timed_rounds.h"

#include <cmath>
#include <numeric>
#include <stdexcept>

namespace atl::train {

TimedRounds::TimedRounds(double period_s, std::int64_t min_round_steps)
    : period_(period_s), min_round_steps_(min_round_steps) {}

void TimedRounds::start(double now) {
  mark_ = now - carried_;
  running_ = true;
  paused_ = false;
}

void TimedRounds::pause(double now) {
  if (!running_ || paused_) return;
  paused_ = true;
  paused_at_ = now;
}

void TimedRounds::resume(double now) {
  if (!running_ || !paused_) return;
  paused_ = false;
  mark_ += now - paused_at_;
}

double TimedRounds::elapsed(double now) const {
  if (!running_) return carried_;
  return (paused_ ? paused_at_ : now) - mark_;
}

bool TimedRounds::step_done(double now) {
  ++since_sync_;
  return elapsed(now) >= period_;
}

std::int64_t TimedRounds::Round::steps_since_sync() const {
  return std::accumulate(steps.begin(), steps.end(), std::int64_t{0});
}

std::int64_t TimedRounds::Round::total_steps() const {
  return std::accumulate(local_steps.begin(), local_steps.end(), std::int64_t{0});
}

TimedRounds::Round TimedRounds::join(comm::Communicator& comm, int local_step) {
  const std::vector<std::int64_t> mine{since_sync_, local_step};
  const auto all = comm.allgather_each<std::int64_t>(mine);  // worker-major
  Round r;
  for (std::size_t w = 0; w < all.size() / 2; ++w) {
    r.steps.push_back(all[2 * w]);
    r.local_steps.push_back(all[2 * w + 1]);
  }
  r.skipped = r.steps_since_sync() < min_round_steps_;
  return r;
}

void TimedRounds::end_round(double now, bool synced) {
  ++rounds_;
  if (!synced) ++skipped_;
  if (synced) since_sync_ = 0;
  carried_ = 0;
  mark_ = now;
  paused_ = false;
}

std::vector<double> TimedRounds::save(double now) const {
  return {elapsed(now), static_cast<double>(since_sync_), static_cast<double>(rounds_),
          static_cast<double>(skipped_)};
}

void TimedRounds::load(std::span<const double> s) {
  if (s.size() != 4) throw std::invalid_argument("the aedit round state has the wrong length");
  for (double x : s) {
    if (!std::isfinite(x) || x < 0)
      throw std::invalid_argument("the aedit round state holds a negative or non-finite value");
  }
  carried_ = s[0];
  since_sync_ = static_cast<std::int64_t>(s[1]);
  rounds_ = static_cast<std::int64_t>(s[2]);
  skipped_ = static_cast<std::int64_t>(s[3]);
  running_ = false;
}

}  // namespace atl::train
