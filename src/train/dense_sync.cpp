#include "dense_sync.h"

#include <algorithm>
#include <stdexcept>

namespace atl::train {

DenseSync::DenseSync(std::vector<torch::Tensor> params, std::uint64_t bucket_bytes,
                     double topk_share)
    : flat_params_(std::move(params)),
      bucket_elements_(std::max<std::uint64_t>(1, bucket_bytes / 4)) {
  flat_.resize(flat_params_.elements());
  if (topk_share > 0) topk_.emplace(flat_params_.elements(), topk_share);
}

int DenseSync::gather() { return flat_params_.gather_grads(flat_); }

void DenseSync::run_gathered(comm::Communicator& comm, sync::SyncScheme& scheme) {
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

void DenseSync::post_gathered(comm::Communicator& comm) {
  if (topk_ || !posted_.empty())
    throw std::logic_error("DenseSync::post_gathered: top-k or posted");
  post_range(comm, -1, 0, flat_.size());
}

void DenseSync::finish_gathered(comm::Communicator& comm) {
  if (posted_.size() != 1 || posted_[0].unit != -1)
    throw std::logic_error("DenseSync::finish_gathered without post_gathered");
  wait_posted(comm, nullptr, 0);
}

void DenseSync::post_range(comm::Communicator& comm, int unit, std::size_t begin, std::size_t end) {
  Posted p{unit, comm.wtime(), {}};
  for (std::size_t b = begin; b < end; b += bucket_elements_) {
    p.requests.push_back(
        comm.iallreduce(std::span<float>(flat_.data() + b, std::min(bucket_elements_, end - b)),
                        comm::ReduceOp::sum));
  }
  posted_.push_back(std::move(p));
}

void DenseSync::wait_posted(comm::Communicator& comm, Timeline* timeline, int step) {
  for (auto& p : posted_) {
    const double wait = comm.wtime();
    for (auto& r : p.requests) comm.wait(r);
    if (timeline) timeline->record(step, Timeline::Kind::sync, p.unit, p.at, wait, comm.wtime());
  }
  posted_.clear();
  flat_params_.scatter_grads(flat_, 1.0f / static_cast<float>(comm.size()));
}

void DenseSync::set_units(const std::vector<int>& unit_of_param) {
  const auto& params = flat_params_.params();
  if (unit_of_param.size() != params.size()) {
    throw std::invalid_argument("DenseSync: one unit per parameter");
  }
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::vector<bool> seen;
  std::size_t off = 0;
  int last = -1;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const int u = unit_of_param[k];
    if (u < 0) throw std::invalid_argument("DenseSync: negative unit");
    const auto i = static_cast<std::size_t>(u);
    if (i >= ranges.size()) {
      ranges.resize(i + 1, {0, 0});
      seen.resize(i + 1, false);
    }
    if (u != last) {  // a unit's first parameter: its range starts here, and only here
      if (seen[i])
        throw std::invalid_argument("DenseSync: a unit's parameters are not consecutive");
      seen[i] = true;
      ranges[i] = {off, off};
      last = u;
    }
    off += static_cast<std::size_t>(params[k].numel());
    ranges[i].second = off;
  }
  unit_ranges_ = std::move(ranges);
}

void DenseSync::post_unit(comm::Communicator& comm, int unit) {
  if (!overlaps()) throw std::logic_error("DenseSync::post_unit without units (or with top-k)");
  comm.advance_stages();  // the units posted before move on to their second stage
  if (unit < 0 || static_cast<std::size_t>(unit) >= unit_ranges_.size()) return;
  const auto [begin, end] = unit_ranges_[static_cast<std::size_t>(unit)];
  if (begin == end) return;
  for (const auto& p : posted_)
    if (p.unit == unit) return;
  flat_params_.gather_grads_range(flat_, begin, end);
  post_range(comm, unit, begin, end);
}

void DenseSync::finish(comm::Communicator& comm, Timeline* timeline, int step) {
  for (int u = static_cast<int>(unit_ranges_.size()) - 1; u >= 0; --u) post_unit(comm, u);
  wait_posted(comm, timeline, step);
}

void DenseSync::discard(comm::Communicator& comm) {
  for (auto& p : posted_)
    for (auto& r : p.requests) comm.wait(r);
  posted_.clear();
}

}  // namespace atl::train
