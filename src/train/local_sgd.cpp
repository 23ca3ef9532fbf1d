#include "local_sgd.h"

#include <algorithm>
#include <cmath>

#include "atoll/util/fault_point.h"
#include "nonfinite.h"
#include "sharded_optimizer.h"

namespace atl::train {

template <class Index>
LocalSgd<Index>::LocalSgd(const TrainConfig& cfg, Engine& engine, int workers,
                          comm::Communicator* group)
    : engine_(engine),
      scheme_(sync::make_scheme(cfg.sync, sync_options(cfg))),
      dense_(engine.dense),
      sync_every_(cfg.sync_every),
      sync_warmup_steps_(cfg.sync_warmup_steps),
      outer_lr_(cfg.outer_lr),
      outer_momentum_(cfg.outer_momentum),
      layers_(unit_count(cfg.model.layers)),
      group_(group),
      shards_(dense_unit_ranges(engine, cfg.model.layers), engine.vocab, engine.embedding.size(1),
              cfg.shard ? group : nullptr),
      step_weight_(cfg.step_weight),
      embedding_rows_(cfg.embedding_rows),
      touched_mean_(cfg.embedding_mean == "touched"),
      fault_(parse_faults(cfg.inject_fault).corrupt) {
  const int world = workers;
  const bool edit = cfg.strategy == "edit" || cfg.strategy == "aedit";
  overlap_ = edit && cfg.overlap;
  prefetch_ = cfg.sync_prefetch;
  if (cfg.strategy == "aedit") timed_.emplace(cfg.sync_seconds, cfg.min_round_steps);
  if (edit && cfg.penalty) {
    penalty_.emplace(static_cast<std::size_t>(layers_), static_cast<std::size_t>(world),
                     localsgd::PenaltyOptions{true, cfg.anomaly_threshold, cfg.ewma_alpha,
                                              cfg.ewma_warmup, cfg.weight_temperature, cfg.clip});
  }
}

template <class Index>
void LocalSgd<Index>::begin_step(comm::Communicator& comm, int step) {
  if (!is_local(step)) return;
  if (timed_ && !timed_->running()) timed_->start(comm.wtime());
  if (started_) return;
  outer_dense_.assign(shards_.local_elements(), 0.0f);
  for (int u = 1; u < layers_; ++u) {
    const auto& r = shards_.local(u);
    read_unit(u, std::span<float>(outer_dense_).subspan(r.begin, r.size()));
  }
  momentum_dense_.assign(shards_.local_elements(), 0.0f);
  outer_embedding_ = engine_.embedding_block().clone();  // this rank's block (all rows unsharded)
  momentum_embedding_ = torch::zeros_like(outer_embedding_);
  touched_.assign(static_cast<std::size_t>(engine_.vocab), 0);
  started_ = true;
}

template <class Index>
bool LocalSgd<Index>::end_step(comm::Communicator& comm, int step, const RowGradient& local_rows) {
  if (!started_ || !is_local(step)) return false;
  for (auto row : local_rows.rows) touched_[static_cast<std::size_t>(row)] = 1;
  round_.reset();
  if (timed_) {  // aedit: a round when the time has come, maybe skipped
    bool due = timed_->step_done(comm.wtime());
    // The 2-D mesh: the ranks of a worker read their clocks at slightly different times; they
    // join a round together if any of them finds it due (its clock is the worker's).
    if (group_) due = group_->allreduce_value<std::int32_t>(due ? 1 : 0, comm::ReduceOp::max) != 0;
    if (!due) return false;
    round_ = timed_->join(comm, step);
    if (round_->skipped) {
      timed_->end_round(comm.wtime(), false);
      return false;
    }
  } else if ((step - sync_warmup_steps_) % sync_every_ != 0) {
    return false;
  }
  begin_sync(comm, step);
  if (!overlap_) flush(comm);
  if (timed_) timed_->end_round(comm.wtime(), true);
  return true;
}

template <class Index>
void LocalSgd<Index>::pause_clock(comm::Communicator& comm) {
  if (timed_) timed_->pause(comm.wtime());
}

template <class Index>
void LocalSgd<Index>::resume_clock(comm::Communicator& comm) {
  if (timed_) timed_->resume(comm.wtime());
}

// aedit --step-weight r: w'_i = (1 − r)·w_i + r·s_i / Σ_j s_j, the sum over the workers that are
// not dropped (a dropped worker keeps weight 0); Σ w' = 1 stays.
template <class Index>
void LocalSgd<Index>::weigh_by_steps(std::vector<double>& weights) const {
  if (step_weight_ <= 0 || !round_) return;
  double kept_steps = 0;
  for (std::size_t w = 0; w < weights.size(); ++w)
    if (weights[w] > 0) kept_steps += static_cast<double>(round_->steps[w]);
  if (kept_steps <= 0) return;
  for (std::size_t w = 0; w < weights.size(); ++w) {
    if (weights[w] <= 0) continue;
    weights[w] = (1 - step_weight_) * weights[w] +
                 step_weight_ * static_cast<double>(round_->steps[w]) / kept_steps;
  }
}

// Δ over this rank's block of rows (all rows unsharded), indexed within the block: rows of E
// values (--embedding-rows, the default) or elements.
template <class Index>
sparse::SparseGradient<Index> LocalSgd<Index>::embedding_pseudo_gradient() {
  const auto E = static_cast<std::size_t>(engine_.embedding.size(1));
  const auto first = static_cast<std::size_t>(shards_.row_begin());
  const auto rows = static_cast<std::size_t>(shards_.rows());
  const auto block = engine_.embedding_block();
  const float* theta = block.data_ptr<float>();
  const float* outer = outer_embedding_.data_ptr<float>();
  sparse::SparseGradient<Index> g;
  g.elements = rows * E;
  if (embedding_rows_) g.width = static_cast<std::uint32_t>(E);  // one index per row
  for (std::size_t row = 0; row < rows; ++row) {
    if (!touched_[first + row]) continue;
    if (embedding_rows_) {
      g.indices.push_back(static_cast<Index>(row));
      for (std::size_t j = 0; j < E; ++j)
        g.values.push_back(outer[row * E + j] - theta[row * E + j]);
      continue;
    }
    for (std::size_t j = 0; j < E; ++j) {
      g.indices.push_back(static_cast<Index>(row * E + j));
      g.values.push_back(outer[row * E + j] - theta[row * E + j]);
    }
  }
  return g;
}

template <class Index>
std::size_t LocalSgd<Index>::state_bytes() const {
  const std::size_t dense = outer_dense_.size() + momentum_dense_.size() + delta_dense_.size();
  const auto rows = static_cast<std::size_t>(shards_.rows() * engine_.embedding.size(1));
  return (dense + 2 * rows) * sizeof(float);
}

template <class Index>
double LocalSgd<Index>::unit_squares(const std::vector<float>& buffer, int unit) {
  const auto& r = shards_.local(unit);
  double sq = 0;
  for (std::size_t i = r.begin; i < r.end; ++i) sq += double(buffer[i]) * buffer[i];
  return shards_.sum_over_group({sq})[0];
}

// This worker's values of its piece of unit u: the model's, or (parameters sharded) the pieces.
template <class Index>
void LocalSgd<Index>::read_unit(int unit, std::span<float> out) {
  if (engine_.sharded) return engine_.sharded->params().read_piece(unit, out);
  dense_.gather_part(out, shards_.piece_begin(unit));
}

template <class Index>
void LocalSgd<Index>::unit_to_model(int unit) {
  const auto& r = shards_.local(unit);
  if (engine_.sharded) {  // parameters sharded: the piece; the unit is gathered before its use
    engine_.sharded->params().write_piece(
        unit, std::span<const float>(outer_dense_).subspan(r.begin, r.size()));
    return;
  }
  // Not sharded: this rank holds the whole unit.
  dense_.scatter_part(std::span<const float>(outer_dense_).subspan(r.begin, r.size()),
                      shards_.full(unit).begin);
}

template <class Index>
void LocalSgd<Index>::embedding_to_model() {
  if (engine_.sharded) {  // this rank's block; a step gathers the rows it uses from the blocks
    torch::NoGradGuard no_grad;
    engine_.embedding_block().copy_(outer_embedding_);
    return;
  }
  const auto n = static_cast<std::size_t>(outer_embedding_.numel());
  const auto full = shards_.gather_rows({outer_embedding_.data_ptr<float>(), n});
  torch::NoGradGuard no_grad;  // released before any MPI call (SMPI switches ranks there)
  std::copy(full.begin(), full.end(), engine_.embedding.detach().data_ptr<float>());
}

template <class Index>
void LocalSgd<Index>::begin_sync(comm::Communicator& comm, int step) {
  if (pending_) flush(comm);
  util::fault_point("outer_sync");  // --inject-fault kill/stop
  bytes_at_begin_ = comm.traffic().bytes_sent;
  last_dropped_.clear();
  last_skipped_.clear();
  last_weights_ = {};
  // Δ = θ̄ − θ for the dense parameters and the embedding rows this worker touched.
  delta_dense_.resize(shards_.local_elements());
  for (int u = 1; u < layers_; ++u) {
    const auto& r = shards_.local(u);
    read_unit(u, std::span<float>(delta_dense_).subspan(r.begin, r.size()));
  }
  for (std::size_t i = 0; i < delta_dense_.size(); ++i)
    delta_dense_[i] = outer_dense_[i] - delta_dense_[i];
  local_ = embedding_pseudo_gradient();
  std::fill(touched_.begin(), touched_.end(), 0);
  fault_fired_ = false;
  if (fault_ && step >= fault_->step) {  // experiments: this worker's Δ corrupted once
    if (comm.rank() == fault_->rank) {
      const auto f = static_cast<float>(fault_->scale);
      for (auto& x : delta_dense_) x *= f;
      for (auto& x : local_.values) x *= f;
    }
    fault_fired_ = true;
    fault_.reset();
  }
  // Weights: 1/n each (diloco), or the penalty's per layer (edit), applied to Δ before the sums.
  if (penalty_) {
    penalize(comm, local_);
  } else {
    average_finite(comm);
  }
  note_touched_weights();
  requests_.clear();
  requests_.resize(static_cast<std::size_t>(layers_));
  posted_at_.assign(static_cast<std::size_t>(layers_), 0.0);
  next_post_ = 1;
  next_finish_ = 0;
  pending_ = true;
}

template <class Index>
void LocalSgd<Index>::post_through(comm::Communicator& comm, int unit) {
  for (; next_post_ <= std::min(unit, layers_ - 1); ++next_post_) {
    const auto& r = shards_.local(next_post_);
    posted_at_[next_post_] = comm.wtime();
    requests_[next_post_] = comm.iallreduce(
        std::span<float>(delta_dense_).subspan(r.begin, r.end - r.begin), comm::ReduceOp::sum);
  }
}

template <class Index>
void LocalSgd<Index>::before_unit(comm::Communicator& comm, int unit) {
  if (!pending_ || unit < next_finish_) return;
  // Prefetch 0: every unit's allreduce posted at once, while the embedding synchronizes.
  const int ahead = prefetch_ == 0 ? layers_ : prefetch_;
  post_through(comm, unit + ahead);
  while (next_finish_ <= unit) finish_unit(comm, next_finish_);
}

template <class Index>
void LocalSgd<Index>::progress(comm::Communicator& comm) {
  if (pending_ && next_finish_ < next_post_) comm.progress(requests_[next_finish_]);
}

template <class Index>
void LocalSgd<Index>::flush(comm::Communicator& comm) {
  if (!pending_) return;
  post_through(comm, layers_ - 1);  // the dense units move while the embedding synchronizes
  while (pending_) finish_unit(comm, next_finish_);
}

template <class Index>
bool LocalSgd<Index>::clipping() const {
  return penalty_ && penalty_->options().clip > 0;
}

template <class Index>
double LocalSgd<Index>::clip_scale_of(double norm) const {
  return localsgd::LayerPenalty::clip_scale(norm, penalty_->options().clip);
}

// The clipping factor of dense unit u's average Δ̄ (its norm over the whole unit: summed over the
// shard group when sharded); 1 without clipping.
template <class Index>
double LocalSgd<Index>::clip_scale(int unit) {
  if (!clipping()) return 1.0;
  return clip_scale_of(std::sqrt(unit_squares(delta_dense_, unit)));
}

// Unit u of the pending synchronization: Δ̄ complete, ||Δ̄|| clipped, the outer step (none for
// a unit every worker was an outlier in), and θ̄ into this worker's model.
template <class Index>
void LocalSgd<Index>::finish_unit(comm::Communicator& comm, int unit) {
  if (unit == 0) {
    finish_embedding(comm);
  } else {
    const double wait_begin = comm.wtime();
    comm.wait(requests_[unit]);
    if (sync_event_) sync_event_(unit, posted_at_[unit], wait_begin, comm.wtime());
    const auto& r = shards_.local(unit);
    const bool skip =
        std::find(last_skipped_.begin(), last_skipped_.end(), unit) != last_skipped_.end();
    if (!skip) outer_step_dense(r.begin, r.end, clip_scale(unit));
    unit_to_model(unit);
  }
  if (++next_finish_ == layers_) {
    pending_ = false;
    last_bytes_sent_ = comm.traffic().bytes_sent - bytes_at_begin_;
  }
}

template <class Index>
void LocalSgd<Index>::finish_embedding(comm::Communicator& comm) {
  const double t0 = comm.wtime();
  scheme_->synchronize(comm, local_, emb_result_);
  const auto E = static_cast<std::int64_t>(engine_.embedding.size(1));
  auto rows = touched_rows(emb_result_, E, 1.0);  // rows of this rank's block
  if (touched_mean_) mean_over_touching(comm, rows);
  const bool skip = std::find(last_skipped_.begin(), last_skipped_.end(), 0) != last_skipped_.end();
  if (!skip) {
    double scale = 1.0;
    if (clipping()) {
      double sq = 0;
      for (float x : rows.values) sq += double(x) * x;
      scale = clip_scale_of(std::sqrt(shards_.sum_over_group({sq})[0]));
    }
    outer_step_embedding(rows, scale);
  }
  embedding_to_model();
  if (sync_event_) sync_event_(0, t0, t0, comm.wtime());
}

// --embedding-mean touched: this worker's weight at each row of its Δ (after the weights, so a
// dropped worker's rows are gone).
template <class Index>
void LocalSgd<Index>::note_touched_weights() {
  if (!touched_mean_) return;
  touched_weights_.assign(static_cast<std::size_t>(shards_.rows()), 0.0f);
  set_row_weights(local_, engine_.embedding.size(1), embedding_weight_, touched_weights_);
}

// Each row of Σ w_i Δ_i divided by the weights of the workers that touched it, so that a row one
// worker saw moves as far as that worker moved it, not 1/n as far.
template <class Index>
void LocalSgd<Index>::mean_over_touching(comm::Communicator& comm, RowGradient& rows) {
  comm.allreduce(std::span<float>(touched_weights_), comm::ReduceOp::sum);
  divide_by_row_weights(rows, engine_.embedding.size(1), touched_weights_);
}

template <class Index>
void LocalSgd<Index>::penalize(comm::Communicator& comm, sparse::SparseGradient<Index>& local) {
  // Each layer's norm over the whole worker: this rank's pieces, summed over the shard group.
  std::vector<double> norms(static_cast<std::size_t>(layers_), 0.0);
  for (int u = 1; u < layers_; ++u)
    for (std::size_t i = shards_.local(u).begin; i < shards_.local(u).end; ++i)
      norms[u] += double(delta_dense_[i]) * delta_dense_[i];
  for (float x : local.values) norms[0] += double(x) * x;
  norms = shards_.sum_over_group(std::move(norms));
  for (auto& x : norms) x = std::sqrt(x);
  const auto all = comm.allgather_each<double>(norms);  // worker-major: all[w·L + l]
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<double> mine(static_cast<std::size_t>(layers_), 0.0);
  for (int l = 0; l < layers_; ++l) {
    std::vector<double> layer_norms(n);
    for (std::size_t w = 0; w < n; ++w) layer_norms[w] = all[w * layers_ + l];
    auto d = penalty_->decide(static_cast<std::size_t>(l), layer_norms);
    weigh_by_steps(d.weights);
    for (auto w : d.dropped) last_dropped_.emplace_back(l, static_cast<int>(w));
    if (d.skip) last_skipped_.push_back(l);
    mine[l] = d.weights[static_cast<std::size_t>(comm.rank())];
    note_weights(d.weights);
  }
  last_weights_.max /= layers_;
  last_weights_.effective_workers /= layers_;
  // Scale this worker's Δ by its weight; a dropped worker contributes exact zeros (never 0·NaN).
  for (int u = 1; u < layers_; ++u) {
    const auto w = static_cast<float>(mine[u]);
    for (std::size_t i = shards_.local(u).begin; i < shards_.local(u).end; ++i)
      delta_dense_[i] = w == 0.0f ? 0.0f : delta_dense_[i] * w;
  }
  embedding_weight_ = static_cast<float>(mine[0]);
  if (mine[0] == 0.0) {
    local.indices.clear();
    local.values.clear();
  } else {
    const auto w = static_cast<float>(mine[0]);
    for (auto& x : local.values) x *= w;
  }
}

// diloco's weights: 1/n each, except that a worker whose Δ holds a NaN or an infinity is dropped
// (weight 0, exact zeros sent) and the others share its weight, as EDiT's penalty drops an
// anomalous worker; the workers learn who is finite in one allgather of flags. No finite worker:
// every unit's outer step is skipped.
template <class Index>
void LocalSgd<Index>::average_finite(comm::Communicator& comm) {
  const bool finite_here = all_finite(delta_dense_) && all_finite(local_.values);
  const double bad = shards_.sum_over_group({finite_here ? 0.0 : 1.0})[0];
  const auto finite = comm.allgather_each<double>(std::vector<double>{bad > 0 ? 0.0 : 1.0});
  double kept = 0;
  for (double f : finite) kept += f;
  std::vector<double> weights(finite.size(), 0.0);
  for (std::size_t w = 0; w < finite.size(); ++w) {
    if (finite[w] > 0) continue;
    for (int l = 0; l < layers_; ++l) last_dropped_.emplace_back(l, static_cast<int>(w));
  }
  if (kept == 0) {
    for (int l = 0; l < layers_; ++l) last_skipped_.push_back(l);
  } else {
    for (std::size_t w = 0; w < finite.size(); ++w) weights[w] = finite[w] / kept;
  }
  weigh_by_steps(weights);
  const auto w = static_cast<float>(weights[static_cast<std::size_t>(comm.rank())]);
  embedding_weight_ = w;
  if (w == 0.0f) {  // exact zeros, never 0·NaN
    std::fill(delta_dense_.begin(), delta_dense_.end(), 0.0f);
    local_.indices.clear();
    local_.values.clear();
    return;
  }
  for (auto& x : delta_dense_) x *= w;
  for (auto& x : local_.values) x *= w;
}

// Adds one layer's largest weight and effective number of workers 1/Σw² (n under plain averaging,
// 1 when one worker has all the weight; 0 for a skipped layer) to the sums penalize averages.
template <class Index>
void LocalSgd<Index>::note_weights(const std::vector<double>& weights) {
  double max = 0.0, squares = 0.0;
  for (double w : weights) {
    max = std::max(max, w);
    squares += w * w;
  }
  last_weights_.max += max;
  last_weights_.effective_workers += squares > 0.0 ? 1.0 / squares : 0.0;
}

// Outer SGD with Nesterov momentum on θ̄ (torch's rule) over [begin, end) of the dense buffer,
// Δ̄ scaled by `scale` (clipping).
template <class Index>
void LocalSgd<Index>::outer_step_dense(std::size_t begin, std::size_t end, double scale) {
  const auto lr = static_cast<float>(outer_lr_), mu = static_cast<float>(outer_momentum_);
  const auto c = static_cast<float>(scale);
  for (std::size_t i = begin; i < end; ++i) {
    const float d = delta_dense_[i] * c;
    if (mu != 0.0f) {
      momentum_dense_[i] = mu * momentum_dense_[i] + d;
      outer_dense_[i] -= lr * (d + mu * momentum_dense_[i]);
    } else {
      outer_dense_[i] -= lr * d;
    }
  }
}

// The embedding: Δ̄ is sparse (rows), the momentum decays on every row (DiLoCo's dense rule).
template <class Index>
void LocalSgd<Index>::outer_step_embedding(const RowGradient& rows, double scale) {
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
void LocalSgd<Index>::with_outer_params(comm::Communicator& comm, const std::function<void()>& f) {
  flush(comm);
  if (!started_) return f();
  // This worker's values kept aside (parameters sharded: its pieces).
  std::vector<float> mine(engine_.sharded ? shards_.local_elements() : dense_.elements());
  if (engine_.sharded) {
    for (int u = 1; u < layers_; ++u)
      read_unit(u, std::span<float>(mine).subspan(shards_.local(u).begin, shards_.local(u).size()));
  } else {
    dense_.gather_values(mine);
  }
  auto my_embedding = engine_.embedding_block().clone();
  for (int u = 1; u < layers_; ++u) unit_to_model(u);
  embedding_to_model();
  f();
  if (engine_.sharded) {
    for (int u = 1; u < layers_; ++u) {
      const auto& r = shards_.local(u);
      engine_.sharded->params().write_piece(
          u, std::span<const float>(mine).subspan(r.begin, r.size()));
    }
  } else {
    dense_.scatter_values(mine);
  }
  torch::NoGradGuard no_grad;
  engine_.embedding_block().copy_(my_embedding);
}

template class LocalSgd<std::uint32_t>;
template class LocalSgd<std::uint64_t>;

}  // namespace atl::train
