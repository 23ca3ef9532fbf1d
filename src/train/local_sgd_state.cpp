// LocalSgd's checkpoint state: θ̄, the outer momentum and the penalty's detector (shared by all
// workers, rank 0 writes them; under the 2-D mesh's sharding every rank writes its share to its
// own file) and this worker's touched embedding rows and (aedit) round clock and
// counters (its own file).
#include <stdexcept>
#include <string>

#include "local_sgd.h"

namespace atl::train {

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
  outer_dense_ = to_vector("diloco_outer_dense", shards_.local_elements());
  momentum_dense_ = to_vector("diloco_momentum_dense", shards_.local_elements());
  ar.read("diloco_outer_embedding", outer_embedding_, true);
  ar.read("diloco_momentum_embedding", momentum_embedding_, true);
  const std::vector<std::int64_t> block{shards_.rows(), engine_.embedding.size(1)};
  if (!outer_embedding_.sizes().equals(block) || !momentum_embedding_.sizes().equals(block)) {
    throw std::runtime_error("checkpoint: the synchronized embedding has the wrong shape");
  }
  touched_.assign(static_cast<std::size_t>(engine_.vocab), 0);
  if (penalty_) {
    torch::Tensor state;
    ar.read("edit_penalty_state", state, true);
    auto c = state.contiguous();
    penalty_->load(
        std::span<const double>(c.data_ptr<double>(), static_cast<std::size_t>(c.numel())));
  }
}

template <class Index>
void LocalSgd<Index>::save_local(torch::serialize::OutputArchive& ar, double now) const {
  if (timed_) {
    auto state = timed_->save(now);
    ar.write(
        "aedit_rounds",
        torch::from_blob(state.data(), {static_cast<std::int64_t>(state.size())}, torch::kDouble)
            .clone(),
        true);
  }
  std::vector<std::int64_t> rows;
  for (std::size_t r = 0; r < touched_.size(); ++r)
    if (touched_[r]) rows.push_back(static_cast<std::int64_t>(r));
  ar.write(
      "diloco_touched_rows",
      torch::from_blob(rows.data(), {static_cast<std::int64_t>(rows.size())}, torch::kLong).clone(),
      true);
}

template <class Index>
void LocalSgd<Index>::restart_from_outer() {
  if (!started_) return;  // warm-up: every replica is still the same
  for (int u = 1; u < layers_; ++u) unit_to_model(u);
  embedding_to_model();
  std::fill(touched_.begin(), touched_.end(), 0);
}

template <class Index>
void LocalSgd<Index>::load_local(torch::serialize::InputArchive& ar) {
  if (timed_) {
    torch::Tensor state;
    ar.read("aedit_rounds", state, true);
    auto c = state.contiguous().to(torch::kDouble);
    try {
      timed_->load(
          std::span<const double>(c.data_ptr<double>(), static_cast<std::size_t>(c.numel())));
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(std::string("checkpoint: ") + e.what());
    }
  }
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
