#include "dense_sync.h"

#include <algorithm>

namespace atl::train {

DenseSync::DenseSync(std::vector<torch::Tensor> params, std::uint64_t bucket_bytes,
                     double topk_share)
    : flat_params_(std::move(params)),
      bucket_elements_(std::max<std::uint64_t>(1, bucket_bytes / 4)) {
  flat_.resize(flat_params_.elements());
  if (topk_share > 0) topk_.emplace(flat_params_.elements(), topk_share);
}

void DenseSync::run(comm::Communicator& comm, sync::SyncScheme& scheme) {
  flat_params_.gather_grads(flat_);
  const std::size_t total = flat_.size();
  if (topk_) {
    const auto local = topk_->compress(flat_);
    scheme.synchronize(comm, local, result_);
    if (result_.dense_form) {
      std::copy(result_.dense.begin(), result_.dense.end(), flat_.begin());
    } else {
      std::fill(flat_.begin(), flat_.end(), 0.0f);
      for (std::size_t i = 0; i < result_.sparse.nnz(); ++i) {
        flat_[result_.sparse.indices[i]] = result_.sparse.values[i];
      }
    }
  } else {
    for (std::size_t b = 0; b < total; b += bucket_elements_) {
      comm.allreduce(std::span<float>(flat_.data() + b, std::min(bucket_elements_, total - b)),
                     comm::ReduceOp::sum);
    }
  }
  flat_params_.scatter_grads(flat_, 1.0f / static_cast<float>(comm.size()));
}

}  // namespace atl::train
