#include "sharded_params.h"

#include <algorithm>

namespace atl::train {

ShardedParams::ShardedParams(std::vector<torch::Tensor> dense,
                             std::vector<StateShards::Range> units, std::int64_t embedding_rows,
                             std::int64_t embedding_width, comm::Communicator& group)
    : dense_(std::move(dense)),
      params_(units.size()),
      shards_(units, embedding_rows, embedding_width, &group),
      group_(group) {
  std::size_t at = 0;
  for (const auto& p : dense_) {
    shapes_.push_back(p.sizes().vec());
    starts_.push_back(at);
    at += static_cast<std::size_t>(p.numel());
  }
  for (int u = 1; u < shards_.units(); ++u) {
    const auto& unit = shards_.full(u);
    const std::size_t lo = shards_.piece_begin(u), hi = lo + shards_.local(u).size();
    for (std::size_t k = 0; k < dense_.size(); ++k) {
      const auto n = static_cast<std::size_t>(dense_[k].numel());
      if (starts_[k] >= unit.begin && starts_[k] + n <= unit.end) params_[u].push_back(k);
      const std::size_t b = std::max(lo, starts_[k]), e = std::min(hi, starts_[k] + n);
      if (b >= e) continue;
      parts_.push_back({k, static_cast<std::int64_t>(b - starts_[k]),
                        static_cast<std::int64_t>(e - b), u, b - lo});
      pieces_.push_back(torch::zeros({static_cast<std::int64_t>(e - b)}));
    }
  }
  current_.assign(static_cast<std::size_t>(shards_.units()), true);
  adopt_model();
}

void ShardedParams::adopt_model() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const auto& p = parts_[i];
    pieces_[i].copy_(dense_[p.param].detach().view(-1).narrow(0, p.offset, p.size));
  }
  std::fill(current_.begin(), current_.end(), true);
}

void ShardedParams::post(int unit) {
  pending_.unit = unit;
  pending_.send.assign(shards_.local(unit).size(), 0.0f);
  read_piece(unit, pending_.send);
  pending_.counts.clear();
  for (int g = 0; g < shards_.group_size(); ++g)
    pending_.counts.push_back(shards_.piece_size(unit, g));
  pending_.recv.assign(shards_.full(unit).size(), 0.0f);  // the unit's range: pieces in rank order
  pending_.request = group_.iallgatherv<float>(pending_.send, pending_.counts, pending_.recv);
}

void ShardedParams::install(int unit, const std::vector<float>& all) {
  std::size_t at = 0;
  for (auto k : params_[static_cast<std::size_t>(unit)]) {
    dense_[k].set_data(
        torch::from_blob(const_cast<float*>(all.data()) + at, shapes_[k], torch::kFloat).clone());
    at += static_cast<std::size_t>(dense_[k].numel());
  }
  current_[static_cast<std::size_t>(unit)] = true;
}

void ShardedParams::drop_pending() {
  if (pending_.unit < 0) return;
  group_.wait(pending_.request);
  pending_.unit = -1;
}

void ShardedParams::gather_unit(int unit, bool prefetch) {
  if (unit < 1 || unit >= shards_.units()) return;
  if (!current_[static_cast<std::size_t>(unit)]) {
    if (pending_.unit != unit) {
      drop_pending();
      post(unit);
    }
    group_.wait(pending_.request);
    pending_.unit = -1;
    install(unit, pending_.recv);
  }
  const int next = unit + 1;
  if (prefetch && next < shards_.units() && !current_[static_cast<std::size_t>(next)] &&
      pending_.unit < 0) {
    post(next);
  }
}

void ShardedParams::progress() {
  if (pending_.unit >= 0) group_.progress(pending_.request);
}

void ShardedParams::gather_all() {
  for (int u = 1; u < shards_.units(); ++u) gather_unit(u);
}

void ShardedParams::release() {
  drop_pending();
  for (auto& p : dense_) {
    p.mutable_grad().reset();
    p.set_data(torch::empty({0}));
  }
  std::fill(current_.begin(), current_.end(), false);
}

void ShardedParams::read_piece(int unit, std::span<float> out) const {
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (parts_[i].unit != unit) continue;
    const float* v = pieces_[i].data_ptr<float>();
    std::copy_n(v, parts_[i].size, out.data() + parts_[i].at);
  }
}

void ShardedParams::write_piece(int unit, std::span<const float> in) {
  if (pending_.unit == unit) drop_pending();  // posted before this piece changed
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (parts_[i].unit != unit) continue;
    std::copy_n(in.data() + parts_[i].at, parts_[i].size, pieces_[i].data_ptr<float>());
  }
  current_[static_cast<std::size_t>(unit)] = false;
}

std::size_t ShardedParams::bytes() const {
  std::size_t n = 0;
  for (const auto& p : pieces_) n += static_cast<std::size_t>(p.numel());
  return n * sizeof(float);
}

}  // namespace atl::train
