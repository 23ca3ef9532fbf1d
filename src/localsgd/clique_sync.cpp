#include "atoll/localsgd/clique_sync.h"

#include <stdexcept>

namespace atl::localsgd {

CliqueOuterState::CliqueOuterState(std::span<const float> theta)
    : anchor_(theta.begin(), theta.end()), momentum_(theta.size(), 0.0f) {}

void average(comm::Communicator& comm, std::span<float> values) {
  const auto w = 1.0f / static_cast<float>(comm.size());
  for (auto& x : values) x *= w;
  comm.allreduce(values, comm::ReduceOp::sum);
}

void CliqueOuterState::sync(comm::Communicator& clique, std::span<float> theta, double lr,
                            double momentum) {
  if (theta.size() != anchor_.size()) {
    throw std::invalid_argument("clique sync: the parameters' size differs from the anchor's");
  }
  if (clique.size() < 2) return;
  average(clique, theta);  // θ_C
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
