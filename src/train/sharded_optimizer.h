// The inner optimizer sharded over the 2-D mesh's shard group (ZeRO stage 1): every rank of a
// worker keeps the optimizer state (AdamW's two moments) of its share of the parameters only (the
// same pieces as local SGD's state, local_sgd_shards.h: per unit 1/S of the dense parameters,
// 1/S of the embedding's rows), updates that share from the averaged gradient, and the group
// all-gathers the updated shares into every rank's model. The parameters and gradients stay
// whole on every rank. Element by element the arithmetic is the unsharded optimizer's. Private
// to src/train.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/train/trainer.h"
#include "embedding_rows.h"
#include "lazy_adamw.h"
#include "local_sgd_shards.h"

namespace atl::train {

struct Engine;

class ShardedOptimizer {
 public:
  ShardedOptimizer(Engine& engine, const TrainConfig& config, comm::Communicator& group);

  // One inner step from the model's (averaged) gradients and the embedding's rows (the same on
  // every rank of the group), then the group's all-gather. Collective over the group.
  void step(const RowGradient& rows, double dense_lr, double embed_lr, std::int64_t t);

  // The optimizer's state and the pieces' working copy, in bytes.
  std::size_t state_bytes() const;
  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

 private:
  void step_rows(const RowGradient& rows, double lr, std::int64_t t);
  void gather_dense();
  void gather_rows(const RowGradient& rows);

  Engine& engine_;
  comm::Communicator& group_;
  StateShards shards_;
  // This rank's pieces cut at parameter boundaries (the optimizer's parameters: a copy of the
  // model's values there, taken before and written back after each step) and, per piece, its
  // parameter and offset.
  struct View {
    std::size_t param = 0;
    std::int64_t offset = 0, size = 0;
  };
  std::vector<torch::Tensor> pieces_;
  std::vector<View> where_;
  std::unique_ptr<torch::optim::Optimizer> dense_opt_;
  std::unique_ptr<LazyAdamW> embed_opt_;  // adamw only: moments of this rank's rows
  double weight_decay_;
};

}  // namespace atl::train
