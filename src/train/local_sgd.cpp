#include "local_sgd.h"

#include <algorithm>
#include <cmath>

namespace atl::train {

template <class Index>
LocalSgd<Index>::LocalSgd(const TrainConfig& cfg, Engine& engine, int world)
    : engine_(engine),
      scheme_(sync::make_scheme(cfg.sync)),
      dense_(engine.dense),
      sync_every_(cfg.sync_every),
      sync_warmup_steps_(cfg.sync_warmup_steps),
      outer_lr_(cfg.outer_lr),
      outer_momentum_(cfg.outer_momentum),
      fault_(parse_fault(cfg.inject_fault)) {
  // Penalty layers: 0 the embedding, 1 + i block i, L + 1 everything else (positions, the
  // projection, the final norm, the output layer).
  const int blocks = cfg.model.layers;
  layers_ = blocks + 2;
  std::size_t at = 0;
  for (std::size_t k = 0; k < engine.dense.size(); ++k) {
    const auto& name = engine.dense_names[k];
    int layer = blocks + 1;
    if (name.rfind("blocks.", 0) == 0) layer = 1 + std::stoi(name.substr(7));
    const auto n = static_cast<std::size_t>(engine.dense[k].numel());
    ranges_.push_back({at, at + n, layer});
    at += n;
  }
  if (cfg.strategy == "edit" && cfg.penalty) {
    penalty_.emplace(static_cast<std::size_t>(layers_), static_cast<std::size_t>(world),
                     localsgd::PenaltyOptions{true, cfg.anomaly_threshold, cfg.ewma_alpha,
                                              cfg.ewma_warmup, cfg.weight_temperature, cfg.clip});
  }
}

template <class Index>
void LocalSgd<Index>::begin_step(int step) {
  if (started_ || !is_local(step)) return;
  outer_dense_.assign(dense_.elements(), 0.0f);
  dense_.gather_values(outer_dense_);
  momentum_dense_.assign(dense_.elements(), 0.0f);
  outer_embedding_ = engine_.embedding.detach().clone();
  momentum_embedding_ = torch::zeros_like(outer_embedding_);
  touched_.assign(static_cast<std::size_t>(engine_.embedding.size(0)), 0);
  started_ = true;
}

template <class Index>
bool LocalSgd<Index>::end_step(comm::Communicator& comm, int step, const RowGradient& local_rows) {
  if (!started_ || !is_local(step)) return false;
  for (auto row : local_rows.rows) touched_[static_cast<std::size_t>(row)] = 1;
  if ((step - sync_warmup_steps_) % sync_every_ != 0) return false;
  outer_sync(comm, step);
  return true;
}

template <class Index>
sparse::SparseGradient<Index> LocalSgd<Index>::embedding_pseudo_gradient() const {
  const auto E = static_cast<std::size_t>(engine_.embedding.size(1));
  const float* theta = engine_.embedding.data_ptr<float>();
  const float* outer = outer_embedding_.data_ptr<float>();
  sparse::SparseGradient<Index> g;
  g.elements = touched_.size() * E;
  for (std::size_t row = 0; row < touched_.size(); ++row) {
    if (!touched_[row]) continue;
    for (std::size_t j = 0; j < E; ++j) {
      g.indices.push_back(static_cast<Index>(row * E + j));
      g.values.push_back(outer[row * E + j] - theta[row * E + j]);
    }
  }
  return g;
}

template <class Index>
void LocalSgd<Index>::outer_sync(comm::Communicator& comm, int step) {
  const auto bytes0 = comm.traffic().bytes_sent;
  last_dropped_.clear();
  last_skipped_.clear();
  // Δ = θ̄ − θ for the dense parameters and the embedding rows this worker touched.
  delta_dense_.resize(dense_.elements());
  dense_.gather_values(delta_dense_);
  for (std::size_t i = 0; i < delta_dense_.size(); ++i)
    delta_dense_[i] = outer_dense_[i] - delta_dense_[i];
  auto local = embedding_pseudo_gradient();
  fault_fired_ = false;
  if (fault_ && step >= fault_->step) {  // experiments: this worker's Δ corrupted once
    if (comm.rank() == fault_->rank) {
      const auto f = static_cast<float>(fault_->scale);
      for (auto& x : delta_dense_) x *= f;
      for (auto& x : local.values) x *= f;
    }
    fault_fired_ = true;
    fault_.reset();
  }
  // Weights: 1/n each (diloco), or the penalty's per layer (edit), applied to Δ before the sums.
  std::vector<double> layer_scale(static_cast<std::size_t>(layers_), 1.0);
  if (penalty_) {
    penalize(comm, local);
  } else {
    const float inv = 1.0f / static_cast<float>(comm.size());
    for (auto& x : delta_dense_) x *= inv;
    for (auto& x : local.values) x *= inv;
  }
  comm.allreduce(std::span<float>(delta_dense_), comm::ReduceOp::sum);
  scheme_->synchronize(comm, local, emb_result_);
  const auto E = static_cast<std::int64_t>(engine_.embedding.size(1));
  const auto rows = touched_rows(emb_result_, E, 1.0);
  if (penalty_ && penalty_->options().clip > 0) {  // ||Δ̄|| per layer (the same on every rank)
    std::vector<double> sq(static_cast<std::size_t>(layers_), 0.0);
    for (const auto& r : ranges_)
      for (std::size_t i = r.begin; i < r.end; ++i)
        sq[r.layer] += double(delta_dense_[i]) * delta_dense_[i];
    for (float x : rows.values) sq[0] += double(x) * x;
    for (int l = 0; l < layers_; ++l)
      layer_scale[l] =
          localsgd::LayerPenalty::clip_scale(std::sqrt(sq[l]), penalty_->options().clip);
  }
  for (int l : last_skipped_) layer_scale[l] = 0.0;  // every worker an outlier: no outer step
  outer_step_dense(layer_scale);
  outer_step_embedding(rows, layer_scale[0]);
  // Every worker restarts from θ̄.
  dense_.scatter_values(outer_dense_);
  {
    torch::NoGradGuard no_grad;
    engine_.embedding.detach().copy_(outer_embedding_);
  }
  std::fill(touched_.begin(), touched_.end(), 0);
  last_bytes_sent_ = comm.traffic().bytes_sent - bytes0;
}

template <class Index>
std::vector<double> LocalSgd<Index>::penalize(comm::Communicator& comm,
                                              sparse::SparseGradient<Index>& local) {
  std::vector<double> norms(static_cast<std::size_t>(layers_), 0.0);
  for (const auto& r : ranges_)
    for (std::size_t i = r.begin; i < r.end; ++i)
      norms[r.layer] += double(delta_dense_[i]) * delta_dense_[i];
  for (float x : local.values) norms[0] += double(x) * x;
  for (auto& x : norms) x = std::sqrt(x);
  const auto all = comm.allgather_each<double>(norms);  // worker-major: all[w·L + l]
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<double> mine(static_cast<std::size_t>(layers_), 0.0);
  for (int l = 0; l < layers_; ++l) {
    std::vector<double> layer_norms(n);
    for (std::size_t w = 0; w < n; ++w) layer_norms[w] = all[w * layers_ + l];
    const auto d = penalty_->decide(static_cast<std::size_t>(l), layer_norms);
    for (auto w : d.dropped) last_dropped_.emplace_back(l, static_cast<int>(w));
    if (d.skip) last_skipped_.push_back(l);
    mine[l] = d.weights[static_cast<std::size_t>(comm.rank())];
  }
  // Scale this worker's Δ by its weight; a dropped worker contributes exact zeros (never 0·NaN).
  for (const auto& r : ranges_) {
    const auto w = static_cast<float>(mine[r.layer]);
    for (std::size_t i = r.begin; i < r.end; ++i)
      delta_dense_[i] = w == 0.0f ? 0.0f : delta_dense_[i] * w;
  }
  if (mine[0] == 0.0) {
    local.indices.clear();
    local.values.clear();
  } else {
    const auto w = static_cast<float>(mine[0]);
    for (auto& x : local.values) x *= w;
  }
  return mine;
}

// Outer SGD with Nesterov momentum on θ̄ (torch's rule), per layer scaled by `layer_scale`
// (clipping; 0 skips the layer: neither θ̄ nor its momentum move).
template <class Index>
void LocalSgd<Index>::outer_step_dense(const std::vector<double>& layer_scale) {
  const auto lr = static_cast<float>(outer_lr_), mu = static_cast<float>(outer_momentum_);
  for (const auto& r : ranges_) {
    const auto c = static_cast<float>(layer_scale[r.layer]);
    if (c == 0.0f) continue;
    for (std::size_t i = r.begin; i < r.end; ++i) {
      const float d = delta_dense_[i] * c;
      if (mu != 0.0f) {
        momentum_dense_[i] = mu * momentum_dense_[i] + d;
        outer_dense_[i] -= lr * (d + mu * momentum_dense_[i]);
      } else {
        outer_dense_[i] -= lr * d;
      }
    }
  }
}

// The embedding: Δ̄ is sparse (rows), the momentum decays on every row (DiLoCo's dense rule).
template <class Index>
void LocalSgd<Index>::outer_step_embedding(const RowGradient& rows, double scale) {
  if (scale == 0.0) return;
  const auto lr = static_cast<float>(outer_lr_), mu = static_cast<float>(outer_momentum_);
  const auto c = static_cast<float>(scale);
  const auto E = static_cast<std::size_t>(engine_.embedding.size(1));
  float* outer = outer_embedding_.data_ptr<float>();
  float* b = momentum_embedding_.data_ptr<float>();
  if (mu != 0.0f) {
    const auto n = static_cast<std::size_t>(momentum_embedding_.numel());
    for (std::size_t i = 0; i < n; ++i) b[i] *= mu;
    for (std::size_t k = 0; k < rows.rows.size(); ++k) {
      const std::size_t off = static_cast<std::size_t>(rows.rows[k]) * E;
      for (std::size_t j = 0; j < E; ++j) b[off + j] += c * rows.values[k * E + j];
    }
    for (std::size_t i = 0; i < n; ++i) outer[i] -= lr * mu * b[i];
  }
  for (std::size_t k = 0; k < rows.rows.size(); ++k) {
    const std::size_t off = static_cast<std::size_t>(rows.rows[k]) * E;
    for (std::size_t j = 0; j < E; ++j) outer[off + j] -= lr * c * rows.values[k * E + j];
  }
}

template <class Index>
void LocalSgd<Index>::with_outer_params(const std::function<void()>& f) {
  if (!started_) return f();
  std::vector<float> mine(dense_.elements());
  dense_.gather_values(mine);
  auto my_embedding = engine_.embedding.detach().clone();
  dense_.scatter_values(outer_dense_);
  {
    torch::NoGradGuard no_grad;
    engine_.embedding.detach().copy_(outer_embedding_);
  }
  f();
  dense_.scatter_values(mine);
  torch::NoGradGuard no_grad;
  engine_.embedding.detach().copy_(my_embedding);
}

template <class Index>
void LocalSgd<Index>::save_shared(torch::serialize::OutputArchive& ar) const {
  ar.write("diloco_started", torch::tensor({started_ ? 1 : 0}), true);
  if (!started_) return;
  auto flat = [](const std::vector<float>& v) {
    return torch::from_blob(const_cast<float*>(v.data()), {static_cast<std::int64_t>(v.size())})
        .clone();
  };
  ar.write("diloco_outer_dense", flat(outer_dense_), true);
  ar.write("diloco_momentum_dense", flat(momentum_dense_), true);
  ar.write("diloco_outer_embedding", outer_embedding_, true);
  ar.write("diloco_momentum_embedding", momentum_embedding_, true);
  if (penalty_) {
    auto state = penalty_->save();
    ar.write(
        "edit_penalty_state",
        torch::from_blob(state.data(), {static_cast<std::int64_t>(state.size())}, torch::kDouble)
            .clone(),
        true);
  }
}

template <class Index>
void LocalSgd<Index>::load_shared(torch::serialize::InputArchive& ar) {
  torch::Tensor started;
  ar.read("diloco_started", started, true);
  started_ = started.item<int>() != 0;
  if (!started_) return;
  auto to_vector = [&](const char* key, std::size_t n) {
    torch::Tensor t;
    ar.read(key, t, true);
    if (static_cast<std::size_t>(t.numel()) != n)
      throw std::runtime_error(std::string("checkpoint: ") + key + " has the wrong size");
    auto c = t.contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + n);
  };
  outer_dense_ = to_vector("diloco_outer_dense", dense_.elements());
  momentum_dense_ = to_vector("diloco_momentum_dense", dense_.elements());
  ar.read("diloco_outer_embedding", outer_embedding_, true);
  ar.read("diloco_momentum_embedding", momentum_embedding_, true);
  if (!outer_embedding_.sizes().equals(engine_.embedding.sizes()) ||
      !momentum_embedding_.sizes().equals(engine_.embedding.sizes())) {
    throw std::runtime_error("checkpoint: the synchronized embedding has the wrong shape");
  }
  touched_.assign(static_cast<std::size_t>(engine_.embedding.size(0)), 0);
  if (penalty_) {
    torch::Tensor state;
    ar.read("edit_penalty_state", state, true);
    auto c = state.contiguous();
    penalty_->load(
        std::span<const double>(c.data_ptr<double>(), static_cast<std::size_t>(c.numel())));
  }
}

template <class Index>
void LocalSgd<Index>::save_local(torch::serialize::OutputArchive& ar) const {
  std::vector<std::int64_t> rows;
  for (std::size_t r = 0; r < touched_.size(); ++r)
    if (touched_[r]) rows.push_back(static_cast<std::int64_t>(r));
  ar.write(
      "diloco_touched_rows",
      torch::from_blob(rows.data(), {static_cast<std::int64_t>(rows.size())}, torch::kLong).clone(),
      true);
}

template <class Index>
void LocalSgd<Index>::load_local(torch::serialize::InputArchive& ar) {
  torch::Tensor rows;
  ar.read("diloco_touched_rows", rows, true);
  if (!started_) return;
  const auto* r = rows.data_ptr<std::int64_t>();
  for (std::int64_t k = 0; k < rows.numel(); ++k) {
    if (r[k] < 0 || static_cast<std::size_t>(r[k]) >= touched_.size())
      throw std::runtime_error("checkpoint: a touched embedding row is out of range");
    touched_[static_cast<std::size_t>(r[k])] = 1;
  }
}

template class LocalSgd<std::uint32_t>;
template class LocalSgd<std::uint64_t>;

}  // namespace atl::train
