#include "sharded_embedding.h"

#include <algorithm>
#include <stdexcept>

namespace atl::train {

ShardedEmbedding::ShardedEmbedding(Gpt& model, const StateShards& shards, comm::Communicator& group)
    : model_(model), shards_(shards), group_(group) {
  block_ = model->tok->weight.detach().narrow(0, shards_.row_begin(), shards_.rows()).clone();
}

std::vector<std::int64_t> distinct_ids(std::span<const std::int64_t> ids) {
  std::vector<std::int64_t> out(ids.begin(), ids.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void ShardedEmbedding::gather(std::span<const std::int64_t> ids) {
  const auto mine = distinct_ids(ids);
  const std::int64_t vocab =
      shards_.row_begin(shards_.group_size() - 1) + shards_.rows(shards_.group_size() - 1);
  if (!mine.empty() && (mine.front() < 0 || mine.back() >= vocab)) {
    throw std::out_of_range("sharded embedding: token id outside the vocabulary");
  }
  const auto rows = distinct_ids(group_.allgatherv<std::int64_t>(mine, nullptr));
  // Group rank g owns the rows of U in [row_begin(g), row_begin(g) + rows(g)): one range of U.
  const int S = shards_.group_size();
  const auto E = block_.size(1);
  std::vector<std::size_t> counts(static_cast<std::size_t>(S));
  std::size_t my_first = 0;
  for (int g = 0; g < S; ++g) {
    const auto lo = std::lower_bound(rows.begin(), rows.end(), shards_.row_begin(g));
    const auto hi = std::lower_bound(lo, rows.end(), shards_.row_begin(g) + shards_.rows(g));
    counts[static_cast<std::size_t>(g)] =
        static_cast<std::size_t>(hi - lo) * static_cast<std::size_t>(E);
    if (g == group_.rank()) my_first = static_cast<std::size_t>(lo - rows.begin());
  }
  const auto me = static_cast<std::size_t>(group_.rank());
  std::vector<float> send(counts[me]);
  const float* b = block_.data_ptr<float>();
  for (std::size_t k = 0; k < send.size() / static_cast<std::size_t>(E); ++k) {
    const auto row = rows[my_first + k] - shards_.row_begin();
    std::copy_n(b + row * E, E, send.data() + k * static_cast<std::size_t>(E));
  }
  auto table = torch::empty({static_cast<std::int64_t>(rows.size()), E});
  auto request = group_.iallgatherv<float>(
      send, counts,
      std::span<float>(table.data_ptr<float>(), static_cast<std::size_t>(table.numel())));
  group_.wait(request);
  model_->tok->weight.set_data(table);
  model_->tok_rows = torch::tensor(rows, torch::kLong);
}

void ShardedEmbedding::release() {
  auto& w = model_->tok->weight;
  w.mutable_grad().reset();
  w.set_data(torch::empty({0, block_.size(1)}));
  model_->tok_rows = torch::empty({0}, torch::kLong);
}

std::size_t ShardedEmbedding::bytes() const {
  return static_cast<std::size_t>(block_.numel()) * sizeof(float);
}

void ShardedEmbedding::save(torch::serialize::OutputArchive& ar) const {
  ar.write("sharded_embedding_block", block_, true);
}

void ShardedEmbedding::load(torch::serialize::InputArchive& ar) {
  torch::Tensor block;
  ar.read("sharded_embedding_block", block, true);
  if (block.sizes() != block_.sizes()) {
    throw std::runtime_error("checkpoint: this rank's embedding block has the wrong shape");
  }
  block_.copy_(block);
}

}  // namespace atl::train
