#include "atoll/localsgd/clique_sync.h"

#include <algorithm>
#include <stdexcept>

namespace atl::localsgd {

CliqueOuterState::CliqueOuterState(std::span<const float> theta)
    : anchor_(theta.begin(), theta.end()), momentum_(theta.size(), 0.0f) {}

void average(comm::Communicator& comm, std::span<float> values, CliqueExchange exchange) {
  const auto k = static_cast<std::size_t>(comm.size());
  const auto w = 1.0f / static_cast<float>(k);
  if (exchange != CliqueExchange::full_mesh) {
    for (auto& x : values) x *= w;
    if (exchange == CliqueExchange::ring) {
      comm.ring_allreduce(values, comm::ReduceOp::sum);
    } else {
      comm.allreduce(values, comm::ReduceOp::sum);
    }
    return;
  }
  // Full mesh: the same payload to every member (one copy per peer in the send buffer).
  const auto n = values.size();
  std::vector<float> send(k * n), recv(k * n);
  for (std::size_t m = 0; m < k; ++m) std::copy(values.begin(), values.end(), send.begin() + m * n);
  const std::vector<std::size_t> counts(k, n);
  comm.alltoallv<float>(send, counts, recv, counts);
  send = {};
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (std::size_t m = 0; m < k; ++m) sum += w * recv[m * n + i];
    values[i] = sum;
  }
}

void CliqueOuterState::sync(comm::Communicator& clique, std::span<float> theta, double lr,
                            double momentum, CliqueExchange exchange) {
  if (theta.size() != anchor_.size()) {
    throw std::invalid_argument("clique sync: the parameters' size differs from the anchor's");
  }
  if (clique.size() < 2) return;
  average(clique, theta, exchange);  // θ_C
  const auto rate = static_cast<float>(lr), mu = static_cast<float>(momentum);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const float d = anchor_[i] - theta[i];
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
