#include "sparse_pseudo_gradient.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace atl::train {

SparsePseudoGradient::SparsePseudoGradient(std::size_t elements, double share,
                                           const std::string& scheme, double decay)
    : topk_(elements, share, kChunk, decay), scheme_(sync::make_scheme(scheme)), delta_(elements) {
  if (elements > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("--pseudo-topk: more than 2^32 parameters");
  }
}

localsgd::CliqueMeeting SparsePseudoGradient::exchange(comm::Communicator& clique,
                                                       std::span<const float> anchor,
                                                       std::span<const float> theta,
                                                       std::vector<float>& mean_delta) {
  const std::size_t n = delta_.size();
  if (anchor.size() != n || theta.size() != n) {
    throw std::invalid_argument("--pseudo-topk: the parameters' size differs from the anchor's");
  }
  for (std::size_t i = 0; i < n; ++i) delta_[i] = anchor[i] - theta[i];
  const bool finite =
      std::all_of(delta_.begin(), delta_.end(), [](float x) { return std::isfinite(x); });
  const auto flags = clique.allgather<int>(finite ? 1 : 0);
  localsgd::CliqueMeeting meeting;
  for (int m = 0; m < clique.size(); ++m) {
    if (flags[static_cast<std::size_t>(m)] == 0) meeting.dropped.push_back(m);
  }
  const auto kept = clique.size() - static_cast<int>(meeting.dropped.size());
  mean_delta.assign(n, 0.0f);
  last_bytes_ = 0;
  last_nnz_ = 0;
  if (kept == 0) {
    meeting.skipped = true;
    return meeting;
  }
  sparse::SparseGradient<std::uint32_t> sent;
  sent.elements = n;
  if (finite) sent = topk_.compress(delta_);  // a non-finite Δ never enters the residual
  last_nnz_ = sent.nnz();
  scheme_->synchronize(clique, sent, sum_);
  last_bytes_ = sum_.stats.bytes_sent();
  const float w = 1.0f / static_cast<float>(kept);
  if (sum_.dense_form) {
    for (std::size_t i = 0; i < n; ++i) mean_delta[i] = w * sum_.dense[i];
  } else {
    for (std::size_t i = 0; i < sum_.sparse.nnz(); ++i) {
      mean_delta[sum_.sparse.indices[i]] = w * sum_.sparse.values[i];
    }
  }
  return meeting;
}

}  // namespace atl::train
