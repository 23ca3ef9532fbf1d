#include "site_clock.h"

#include <algorithm>
#include <limits>
#include <span>
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

SiteClock::MemberExits SiteClock::together(std::vector<double> exchange_s) {
  return [exchange_s = std::move(exchange_s)](std::size_t c, const std::vector<double>& arrivals) {
    const double latest = *std::max_element(arrivals.begin(), arrivals.end());
    return std::vector<double>(arrivals.size(), latest + exchange_s.at(c));
  };
}

double SiteClock::meet(const wan::ResolvedRound& round, const MemberExits& exits, int mine,
                       comm::Communicator& clique, bool overlap) {
  auto leave = [&](std::size_t site, double at) {
    (overlap ? in_flight_[site] : clocks_[site]) = at;
  };
  if (!known_everywhere()) {
    if (mine < 0) return now();
    const auto& sites = round[static_cast<std::size_t>(mine)].sites;
    const auto place =
        static_cast<std::size_t>(std::find(sites.begin(), sites.end(), self_) - sites.begin());
    // Each member's arrival (every rank of a site has the same clock): the largest per place.
    std::vector<double> arrivals(sites.size(), -std::numeric_limits<double>::infinity());
    arrivals[place] = now();
    clique.allreduce(std::span<double>(arrivals), comm::ReduceOp::max);
    const double at = exits(static_cast<std::size_t>(mine), arrivals).at(place);
    leave(self_, at);
    return at;
  }
  double end = now();
  for (std::size_t c = 0; c < round.size(); ++c) {
    std::vector<double> arrivals;
    for (auto j : round[c].sites) arrivals.push_back(clocks_[j]);
    const auto at = exits(c, arrivals);
    for (std::size_t m = 0; m < at.size(); ++m) {
      leave(round[c].sites[m], at[m]);
      if (static_cast<int>(c) == mine && round[c].sites[m] == self_) end = at[m];
    }
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
