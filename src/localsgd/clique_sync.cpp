#include "atoll/localsgd/clique_sync.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace atl::localsgd {

CliqueOuterState::CliqueOuterState(std::span<const float> theta)
    : anchor_(theta.begin(), theta.end()), momentum_(theta.size(), 0.0f) {}

void weighted_sum(comm::Communicator& comm, std::span<float> values, float weight,
                  CliqueExchange exchange) {
  if (weight == 0.0f) {
    std::fill(values.begin(), values.end(), 0.0f);
  } else if (weight != 1.0f) {
    for (auto& x : values) x *= weight;
  }
  if (exchange == CliqueExchange::ring) return comm.ring_allreduce(values, comm::ReduceOp::sum);
  if (exchange == CliqueExchange::allreduce) return comm.allreduce(values, comm::ReduceOp::sum);
  // Full mesh: every member's payload goes directly to every other member, point to point (no
  // copy per peer is sent), and each member sums the k payloads in member order (the same sum,
  // bit for bit, on every member).
  const auto k = static_cast<std::size_t>(comm.size()), n = values.size();
  std::vector<float> all(k * n);
  auto request = comm.iallgather<float>(values, all);
  comm.wait(request);
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (std::size_t m = 0; m < k; ++m) sum += all[m * n + i];
    values[i] = sum;
  }
}

void average(comm::Communicator& comm, std::span<float> values, CliqueExchange exchange) {
  weighted_sum(comm, values, 1.0f / static_cast<float>(comm.size()), exchange);
}

CliqueMeeting CliqueOuterState::sync(comm::Communicator& clique, std::span<float> theta, double lr,
                                     double momentum, CliqueExchange exchange) {
  if (theta.size() != anchor_.size()) {
    throw std::invalid_argument("clique sync: the parameters' size differs from the anchor's");
  }
  CliqueMeeting meeting;
  const int k = clique.size();
  if (k < 2) return meeting;
  if (k > 24) throw std::invalid_argument("clique sync: more than 24 members");
  // One exchange: the payload scaled by 1/k (exact zeros from a member that is not finite), and
  // one more element, the sum of 2^m over the members m that are not finite (exact in float).
  const bool finite =
      std::all_of(theta.begin(), theta.end(), [](float x) { return std::isfinite(x); });
  std::vector<float> payload(theta.size() + 1);
  if (finite) {
    const float w = 1.0f / static_cast<float>(k);
    for (std::size_t i = 0; i < theta.size(); ++i) payload[i] = w * theta[i];
  } else {
    payload.back() = static_cast<float>(1 << clique.rank());
  }
  weighted_sum(clique, payload, 1.0f, exchange);
  const auto mask = static_cast<unsigned>(payload.back());
  for (int m = 0; m < k; ++m) {
    if (mask & (1u << m)) meeting.dropped.push_back(m);
  }
  const auto kept = k - static_cast<int>(meeting.dropped.size());
  if (kept == 0) {  // nothing to average: every member restarts from its anchor
    meeting.skipped = true;
    std::copy(anchor_.begin(), anchor_.end(), theta.begin());
    return meeting;
  }
  // θ_C: the mean over the finite members (all of them: the plain mean).
  const float rescale = static_cast<float>(k) / static_cast<float>(kept);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    theta[i] = kept == k ? payload[i] : payload[i] * rescale;
  }
  // Δ_i = θ̄_i − θ_C, in place.
  for (std::size_t i = 0; i < theta.size(); ++i) theta[i] = anchor_[i] - theta[i];
  step(theta, theta, lr, momentum);
  return meeting;
}

void CliqueOuterState::step(std::span<float> theta, std::span<const float> mean_delta, double lr,
                            double momentum) {
  if (theta.size() != anchor_.size() || mean_delta.size() != anchor_.size()) {
    throw std::invalid_argument(
        "clique sync: the pseudo-gradient's size differs from the anchor's");
  }
  const auto rate = static_cast<float>(lr), mu = static_cast<float>(momentum);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const float d = mean_delta[i];  // may alias theta[i]: read before theta is written
    if (mu != 0.0f) {
      momentum_[i] = mu * momentum_[i] + d;
      anchor_[i] -= rate * (d + mu * momentum_[i]);
    } else {
      anchor_[i] -= rate * d;
    }
    theta[i] = anchor_[i];
  }
}

}  // namespace atl::localsgd
