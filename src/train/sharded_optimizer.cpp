#include "sharded_optimizer.h"

#include <algorithm>

#include "engine.h"
#include "flat_params.h"

namespace atl::train {

ShardedOptimizer::ShardedOptimizer(Engine& engine, const TrainConfig& cfg,
                                   comm::Communicator& group)
    : engine_(engine),
      group_(group),
      params_(engine.dense, dense_unit_ranges(engine, cfg.model.layers), engine.embedding.size(0),
              engine.embedding.size(1), group),
      shards_(params_.shards()),
      embedding_(engine.model, shards_, group),
      weight_decay_(cfg.weight_decay) {
  // AdamW decays matrices only (as Engine's optimizer).
  std::vector<torch::Tensor> decay, no_decay;
  auto& pieces = params_.pieces();
  for (std::size_t i = 0; i < pieces.size(); ++i)
    (engine.dense[params_.param_of(i)].dim() >= 2 ? decay : no_decay).push_back(pieces[i]);
  dense_opt_ = dense_optimizer(cfg, pieces, std::move(decay), std::move(no_decay));
  if (cfg.optimizer == "sgd") return;
  embed_opt_ = std::make_unique<LazyAdamW>(embedding_.block());
}

void ShardedOptimizer::step(const RowGradient& rows, double dense_lr, double embed_lr,
                            std::int64_t t) {
  {
    torch::NoGradGuard no_grad;  // released before the group's collectives (SMPI)
    auto& pieces = params_.pieces();
    for (std::size_t i = 0; i < pieces.size() && !grads_ready_; ++i) {  // gradients: views
      const auto& p = engine_.dense[params_.param_of(i)];
      const auto& grad = p.grad();
      const auto n = pieces[i].numel();
      pieces[i].mutable_grad() = grad.defined()
                                     ? grad.detach().view(-1).narrow(0, params_.offset_of(i), n)
                                     : torch::zeros({n});
    }
    for (auto& g : dense_opt_->param_groups()) g.options().set_lr(dense_lr);
    dense_opt_->step();
    for (auto& piece : pieces) piece.mutable_grad().reset();
    grads_ready_ = false;
    step_rows(rows, embed_lr, t);
  }
  params_.release();
  embedding_.release();
}

void ShardedOptimizer::reduce_scatter_grads(double scale, comm::Communicator* across) {
  const int S = shards_.group_size();
  FlatParams flat(engine_.dense);
  std::vector<float> grads(flat.elements());
  flat.gather_grads(grads);
  std::vector<float> send;  // rank-major: every rank's pieces, each rank's in unit order
  send.reserve(grads.size());
  std::vector<std::size_t> counts;
  for (int g = 0; g < S; ++g) {
    counts.push_back(shards_.local_elements(g));
    for (int u = 1; u < shards_.units(); ++u) {
      const auto begin = grads.begin() + static_cast<std::ptrdiff_t>(shards_.piece_begin(u, g));
      send.insert(send.end(), begin, begin + static_cast<std::ptrdiff_t>(shards_.piece_size(u, g)));
    }
  }
  grads = {};
  std::vector<float> mine(shards_.local_elements());
  auto request = group_.ireduce_scatter<float>(send, counts, mine, comm::ReduceOp::sum);
  group_.wait(request);
  if (across) across->allreduce(std::span<float>(mine), comm::ReduceOp::sum);
  torch::NoGradGuard no_grad;
  auto& pieces = params_.pieces();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto n = pieces[i].numel();
    const float* from = mine.data() + params_.local_offset_of(i);
    pieces[i].mutable_grad() = torch::from_blob(const_cast<float*>(from), {n}, torch::kFloat)
                                   .mul(static_cast<float>(scale));
  }
  grads_ready_ = true;
}

// The embedding: the rows of this rank's block, indexed within the block.
void ShardedOptimizer::step_rows(const RowGradient& all_rows, double lr, std::int64_t t) {
  const std::int64_t first = shards_.row_begin(), last = first + shards_.rows();
  const auto E = static_cast<std::size_t>(engine_.embedding.size(1));
  const RowGradient rows = owned_rows(all_rows, static_cast<std::int64_t>(E));
  RowGradient mine;
  for (std::size_t k = 0; k < rows.rows.size(); ++k) {
    if (rows.rows[k] < first || rows.rows[k] >= last) continue;
    mine.rows.push_back(rows.rows[k] - first);
    const auto from = rows.values.begin() + static_cast<std::ptrdiff_t>(k * E);
    mine.values.insert(mine.values.end(), from, from + static_cast<std::ptrdiff_t>(E));
  }
  auto& block = embedding_.block();
  if (embed_opt_) {
    embed_opt_->step(block, mine, lr, weight_decay_, t);
    return;
  }
  float* w = block.data_ptr<float>();  // plain SGD on the touched rows
  const auto rate = static_cast<float>(lr);
  for (std::size_t k = 0; k < mine.rows.size(); ++k)
    for (std::size_t j = 0; j < E; ++j)
      w[static_cast<std::size_t>(mine.rows[k]) * E + j] -= rate * mine.values[k * E + j];
}

std::size_t ShardedOptimizer::state_bytes() const {
  return (embed_opt_ ? embed_opt_->state_bytes() : 0) + adamw_state_bytes(*dense_opt_);
}

void ShardedOptimizer::save(torch::serialize::OutputArchive& ar) const {
  torch::serialize::OutputArchive opt_ar;
  dense_opt_->save(opt_ar);
  ar.write("sharded_dense_optimizer", opt_ar);
  if (embed_opt_) embed_opt_->save(ar, "sharded_embed_adam");
  embedding_.save(ar);
}

void ShardedOptimizer::load(torch::serialize::InputArchive& ar) {
  torch::serialize::InputArchive opt_ar;
  ar.read("sharded_dense_optimizer", opt_ar);
  dense_opt_->load(opt_ar);
  if (embed_opt_) embed_opt_->load(ar, "sharded_embed_adam");
  embedding_.load(ar);
}

}  // namespace atl::train
