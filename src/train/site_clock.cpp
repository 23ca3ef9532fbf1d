#include "site_clock.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace atl::train {

SiteClock::SiteClock(std::vector<double> speeds, std::size_t self, double compute_s)
    : clocks_(speeds.size(), 0.0),
      speeds_(std::move(speeds)),
      in_flight_(speeds_.size(), -1.0),
      self_(self),
      compute_s_(compute_s) {}

void SiteClock::local_step(double measured_s, bool local) {
  if (!known_everywhere()) {
    clocks_[self_] += measured_s / speeds_[self_];
    return;
  }
  for (std::size_t j = 0; j < clocks_.size(); ++j) {
    const double steps = local && !local_share_.empty() ? local_share_[j] : 1.0;
    clocks_[j] += steps * compute_s_ / speeds_[j];
  }
}

void SiteClock::set_round_steps(const std::vector<std::int64_t>& round_steps) {
  if (round_steps.size() != clocks_.size()) {
    throw std::invalid_argument("round steps for " + std::to_string(round_steps.size()) +
                                " sites, not " + std::to_string(clocks_.size()));
  }
  local_share_.clear();
  for (auto s : round_steps)
    local_share_.push_back(static_cast<double>(s) / static_cast<double>(round_steps[self_]));
}

double SiteClock::meet(const wan::ResolvedRound& round, const std::vector<double>& exchange_s,
                       int mine, comm::Communicator& clique, bool overlap) {
  auto leave = [&](std::size_t site, double at) {
    (overlap ? in_flight_[site] : clocks_[site]) = at;
  };
  if (!known_everywhere()) {
    if (mine < 0) return now();
    const double at = clique.allreduce_value(now(), comm::ReduceOp::max) +
                      exchange_s[static_cast<std::size_t>(mine)];
    leave(self_, at);
    return at;
  }
  double end = now();
  for (std::size_t c = 0; c < round.size(); ++c) {
    double latest = 0;
    for (auto j : round[c].sites) latest = std::max(latest, clocks_[j]);
    const double at = latest + exchange_s[c];
    for (auto j : round[c].sites) leave(j, at);
    if (static_cast<int>(c) == mine) end = at;
  }
  return end;
}

void SiteClock::land() {
  for (std::size_t j = 0; j < clocks_.size(); ++j) {
    clocks_[j] = std::max(clocks_[j], in_flight_[j]);
    in_flight_[j] = -1.0;
  }
}

void SiteClock::land_arrived() {
  for (std::size_t j = 0; j < clocks_.size(); ++j)
    if (clocks_[j] >= in_flight_[j]) in_flight_[j] = -1.0;
}

void SiteClock::all_meet(comm::Communicator& world, double seconds) {
  double latest = now();
  if (known_everywhere()) {
    latest = *std::max_element(clocks_.begin(), clocks_.end());
  } else {
    latest = world.allreduce_value(latest, comm::ReduceOp::max);
  }
  std::fill(clocks_.begin(), clocks_.end(), latest + seconds);
}

std::vector<double> SiteClock::state() const {
  std::vector<double> s(clocks_);
  s.insert(s.end(), in_flight_.begin(), in_flight_.end());
  return s;
}

void SiteClock::restore(const std::vector<double>& state) {
  if (state.size() != 2 * clocks_.size()) {
    throw std::invalid_argument("the checkpoint's site clocks are for " +
                                std::to_string(state.size() / 2) + " sites, not " +
                                std::to_string(clocks_.size()));
  }
  std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(clocks_.size()),
            clocks_.begin());
  std::copy(state.begin() + static_cast<std::ptrdiff_t>(clocks_.size()), state.end(),
            in_flight_.begin());
}

}  // namespace atl::train
