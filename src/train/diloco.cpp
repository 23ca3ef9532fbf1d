#include "diloco.h"

#include <algorithm>

namespace atl::train {

template <class Index>
Diloco<Index>::Diloco(const TrainConfig& cfg, Engine& engine)
    : engine_(engine),
      scheme_(sync::make_scheme(cfg.sync)),
      dense_(engine.dense),
      sync_every_(cfg.sync_every),
      sync_warmup_steps_(cfg.sync_warmup_steps),
      outer_lr_(cfg.outer_lr),
      outer_momentum_(cfg.outer_momentum) {}

template <class Index>
void Diloco<Index>::begin_step(int step) {
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
bool Diloco<Index>::end_step(comm::Communicator& comm, int step, const RowGradient& local_rows) {
  if (!started_ || !is_local(step)) return false;
  for (auto row : local_rows.rows) touched_[static_cast<std::size_t>(row)] = 1;
  if ((step - sync_warmup_steps_) % sync_every_ != 0) return false;
  outer_sync(comm);
  return true;
}

template <class Index>
sparse::SparseGradient<Index> Diloco<Index>::embedding_pseudo_gradient() const {
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
void Diloco<Index>::outer_sync(comm::Communicator& comm) {
  const auto bytes0 = comm.traffic().bytes_sent;
  const float inv = 1.0f / static_cast<float>(comm.size());
  const auto lr = static_cast<float>(outer_lr_), mu = static_cast<float>(outer_momentum_);
  // Dense parameters: Δ̄ by allreduce, then the outer step on θ̄.
  delta_dense_.resize(dense_.elements());
  dense_.gather_values(delta_dense_);
  for (std::size_t i = 0; i < delta_dense_.size(); ++i)
    delta_dense_[i] = outer_dense_[i] - delta_dense_[i];
  comm.allreduce(std::span<float>(delta_dense_), comm::ReduceOp::sum);
  for (std::size_t i = 0; i < delta_dense_.size(); ++i) {
    const float d = delta_dense_[i] * inv;
    if (mu != 0.0f) {
      momentum_dense_[i] = mu * momentum_dense_[i] + d;
      outer_dense_[i] -= lr * (d + mu * momentum_dense_[i]);
    } else {
      outer_dense_[i] -= lr * d;
    }
  }
  // Embedding: the sparse pseudo-gradient through the scheme; momentum decays on every row.
  const auto local = embedding_pseudo_gradient();
  scheme_->synchronize(comm, local, emb_result_);
  const auto E = static_cast<std::int64_t>(engine_.embedding.size(1));
  const auto rows = touched_rows(emb_result_, E, 1.0 / comm.size());
  float* outer = outer_embedding_.data_ptr<float>();
  float* b = momentum_embedding_.data_ptr<float>();
  if (mu != 0.0f) {
    const auto n = static_cast<std::size_t>(momentum_embedding_.numel());
    for (std::size_t i = 0; i < n; ++i) b[i] *= mu;
    for (std::size_t k = 0; k < rows.rows.size(); ++k) {
      const std::size_t off = static_cast<std::size_t>(rows.rows[k]) * static_cast<std::size_t>(E);
      for (std::int64_t j = 0; j < E; ++j) b[off + j] += rows.values[k * E + j];
    }
    for (std::size_t i = 0; i < n; ++i) outer[i] -= lr * mu * b[i];
  }
  for (std::size_t k = 0; k < rows.rows.size(); ++k) {
    const std::size_t off = static_cast<std::size_t>(rows.rows[k]) * static_cast<std::size_t>(E);
    for (std::int64_t j = 0; j < E; ++j) outer[off + j] -= lr * rows.values[k * E + j];
  }
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
void Diloco<Index>::with_outer_params(const std::function<void()>& f) {
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
void Diloco<Index>::save_shared(torch::serialize::OutputArchive& ar) const {
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
}

template <class Index>
void Diloco<Index>::load_shared(torch::serialize::InputArchive& ar) {
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
}

template <class Index>
void Diloco<Index>::save_local(torch::serialize::OutputArchive& ar) const {
  std::vector<std::int64_t> rows;
  for (std::size_t r = 0; r < touched_.size(); ++r)
    if (touched_[r]) rows.push_back(static_cast<std::int64_t>(r));
  ar.write(
      "diloco_touched_rows",
      torch::from_blob(rows.data(), {static_cast<std::int64_t>(rows.size())}, torch::kLong).clone(),
      true);
}

template <class Index>
void Diloco<Index>::load_local(torch::serialize::InputArchive& ar) {
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

template class Diloco<std::uint32_t>;
template class Diloco<std::uint64_t>;

}  // namespace atl::train
