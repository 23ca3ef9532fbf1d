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

void ShardedParams::gather_unit(int unit) {
  if (unit < 1 || unit >= shards_.units() || current_[static_cast<std::size_t>(unit)]) return;
  std::vector<float> mine(shards_.local(unit).size());
  read_piece(unit, mine);
  std::vector<std::size_t> counts;
  for (int g = 0; g < shards_.group_size(); ++g) counts.push_back(shards_.piece_size(unit, g));
  std::vector<float> all(shards_.full(unit).size());  // the unit's range: pieces in rank order
  auto request = group_.iallgatherv<float>(mine, counts, all);
  group_.wait(request);
  std::size_t at = 0;
  for (auto k : params_[static_cast<std::size_t>(unit)]) {
    const auto& shape = shapes_[k];
    dense_[k].set_data(torch::from_blob(all.data() + at, shape, torch::kFloat).clone());
    at += static_cast<std::size_t>(dense_[k].numel());
  }
  current_[static_cast<std::size_t>(unit)] = true;
}

void ShardedParams::gather_all() {
  for (int u = 1; u < shards_.units(); ++u) gather_unit(u);
}

void ShardedParams::release() {
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
