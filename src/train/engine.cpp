#include "engine.h"

#include <stdexcept>
#include <string>

#include "sharded_optimizer.h"

namespace atl::train {

Engine::Engine(comm::Communicator& comm, const TrainConfig& cfg)
    : model(cfg.model), vocab(cfg.model.vocab), weight_decay(cfg.weight_decay) {
  // No torch guard may span a communicator call: under SMPI all ranks share one OS thread, and
  // torch's grad mode is thread-local (a guard held across a yield leaks into other ranks).
  for (auto& p : model->parameters()) {
    comm.broadcast(std::span<float>(p.data_ptr<float>(), static_cast<std::size_t>(p.numel())), 0);
  }
  embedding = model->tok->weight;
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& np : model->named_parameters()) {
    if (np.value().is_same(embedding)) continue;
    dense.push_back(np.value());
    dense_names.push_back(np.key());
    (np.value().dim() >= 2 ? decay : no_decay).push_back(np.value());
  }
  dense_opt = dense_optimizer(cfg, dense, std::move(decay), std::move(no_decay));
  if (cfg.optimizer != "sgd") embed_opt = std::make_unique<LazyAdamW>(embedding);
  dense_sync = std::make_unique<DenseSync>(dense, cfg.bucket_bytes, cfg.topk);
  std::vector<int> units;
  for (const auto& name : dense_names) units.push_back(unit_of(name, cfg.model.layers));
  dense_sync->set_units(units);
}

Engine::~Engine() = default;

void Engine::shard_optimizer(const TrainConfig& config, comm::Communicator& group) {
  sharded = std::make_unique<ShardedOptimizer>(*this, config, group);
}

void Engine::inner_step(const RowGradient& rows, double dense_lr, double embed_lr, std::int64_t t) {
  if (sharded) return sharded->step(rows, dense_lr, embed_lr, t);
  for (auto& g : dense_opt->param_groups()) g.options().set_lr(dense_lr);
  dense_opt->step();
  if (embed_opt) {
    embed_opt->step(embedding, rows, embed_lr, weight_decay, t);
    return;
  }
  // Plain SGD on the touched rows: w ← w − lr·g.
  const auto E = static_cast<std::size_t>(embedding.size(1));
  float* w = embedding.data_ptr<float>();
  const auto lr = static_cast<float>(embed_lr);
  const float scale = rows.scale;  // 1 for owned rows, which are scaled already
  for (std::size_t k = 0; k < rows.rows.size(); ++k) {
    if (rows.row_skipped(k, E)) continue;
    float* row = w + static_cast<std::size_t>(rows.rows[k]) * E;
    const float* g = rows.row_values(k, E);
    for (std::size_t j = 0; j < E; ++j) row[j] -= lr * (g[j] * scale);
  }
}

void Engine::with_full_params(std::span<const std::int64_t> ids, const std::function<void()>& f) {
  gather_params();
  gather_embedding(ids);
  f();
  release_params();
}

void Engine::gather_embedding(std::span<const std::int64_t> ids) {
  if (sharded) sharded->embedding().gather(ids);
}

torch::Tensor Engine::embedding_block() {
  return sharded ? sharded->embedding().block() : embedding.detach();
}

void Engine::gather_params() {
  if (sharded) sharded->params().gather_all();
}

void Engine::release_params() {
  if (!sharded) return;
  sharded->params().release();
  sharded->embedding().release();
}

std::size_t Engine::parameter_bytes() const {
  std::size_t n = 0;
  for (const auto& p : model->parameters()) n += static_cast<std::size_t>(p.numel());
  if (sharded) n += (sharded->params().bytes() + sharded->embedding().bytes()) / sizeof(float);
  return n * sizeof(float);
}

std::size_t Engine::optimizer_state_bytes() const {
  if (sharded) return sharded->state_bytes();
  return (embed_opt ? embed_opt->state_bytes() : 0) + adamw_state_bytes(*dense_opt);
}

void Engine::save(torch::serialize::OutputArchive& ar) {
  model->save(ar);
  if (sharded) return sharded->save(ar);
  torch::serialize::OutputArchive opt_ar;
  dense_opt->save(opt_ar);
  ar.write("dense_optimizer", opt_ar);
  if (embed_opt) embed_opt->save(ar, "embed_adam");
}

void Engine::load(torch::serialize::InputArchive& ar) {
  torch::NoGradGuard no_grad;
  model->load(ar);
  if (sharded) return sharded->load(ar);
  torch::serialize::InputArchive opt_ar;
  ar.read("dense_optimizer", opt_ar);
  dense_opt->load(opt_ar);
  if (embed_opt) embed_opt->load(ar, "embed_adam");
}

void Engine::save_residual(torch::serialize::OutputArchive& ar) const {
  if (auto* topk = dense_sync->topk()) ar.write("topk_residual", topk->residual().clone(), true);
}

void Engine::load_residual(torch::serialize::InputArchive& ar, const std::string& key) {
  if (auto* topk = dense_sync->topk()) {
    torch::Tensor residual;
    ar.read(key, residual, true);
    topk->set_residual(residual);
  }
}

std::unique_ptr<torch::optim::Optimizer> dense_optimizer(const TrainConfig& cfg,
                                                         const std::vector<torch::Tensor>& params,
                                                         std::vector<torch::Tensor> decay,
                                                         std::vector<torch::Tensor> no_decay) {
  if (cfg.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(cfg.lr));
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(decay),
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(cfg.lr).weight_decay(cfg.weight_decay)));
  groups.emplace_back(std::move(no_decay), std::make_unique<torch::optim::AdamWOptions>(
                                               torch::optim::AdamWOptions(cfg.lr).weight_decay(0)));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(cfg.lr));
}

std::size_t adamw_state_bytes(const torch::optim::Optimizer& optimizer) {
  std::size_t n = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      n += static_cast<std::size_t>(a->exp_avg().numel() + a->exp_avg_sq().numel());
    }
  }
  return n * sizeof(float);
}

std::vector<StateShards::Range> dense_unit_ranges(const Engine& engine, int layers) {
  std::vector<StateShards::Range> ranges(static_cast<std::size_t>(unit_count(layers)));
  std::size_t at = 0;
  int last = 1;
  for (std::size_t k = 0; k < engine.dense.size(); ++k) {
    const int u = unit_of(engine.dense_names[k], layers);
    if (u < last) throw std::logic_error("dense_unit_ranges: parameters not in unit order");
    if (ranges[u].end == 0) ranges[u].begin = at;
    at += static_cast<std::size_t>(engine.dense[k].numel());
    ranges[u].end = at;
    last = u;
  }
  return ranges;
}

}  // namespace atl::train
