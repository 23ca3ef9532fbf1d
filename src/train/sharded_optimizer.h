// The inner optimizer sharded over the 2-D mesh's shard group: every rank of a worker keeps the
// optimizer state (AdamW's two moments) of its share of the parameters only (the same pieces as
// local SGD's state, local_sgd_shards.h: per unit 1/S of the dense parameters, 1/S of the
// embedding's rows) and updates that share from the averaged gradient. The dense parameters are
// sharded too (sharded_params.h: ZeRO stage 3, released after the update, gathered per unit for
// the next forward pass), and so is the embedding (sharded_embedding.h: a rank keeps its block of
// rows, a step gathers the rows its group's batches use). Element by element the arithmetic is
// the unsharded optimizer's.
// Private to src/train.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/train/trainer.h"
#include "embedding_rows.h"
#include "lazy_adamw.h"
#include "local_sgd_shards.h"
#include "sharded_embedding.h"
#include "sharded_params.h"

namespace atl::train {

struct Engine;

class ShardedOptimizer {
 public:
  ShardedOptimizer(Engine& engine, const TrainConfig& config, comm::Communicator& group);

  // One inner step from the model's (averaged) gradients and the embedding's rows (the same on
  // every rank of the group; each rank updates those of its block), then the model's dense
  // parameters and embedding table released.
  void step(const RowGradient& rows, double dense_lr, double embed_lr, std::int64_t t);

  // The group's dense gradients reduce-scattered: this rank receives the sum over the group of
  // its pieces' gradients (with `across`: then summed over that communicator too, the ranks
  // holding the same pieces in the other groups), times `scale`, as the pieces' gradients for
  // the next step() (instead of every rank averaging whole gradients by allreduce). Collective
  // over the group (and `across`).
  void reduce_scatter_grads(double scale, comm::Communicator* across = nullptr);

  ShardedParams& params() { return params_; }
  ShardedEmbedding& embedding() { return embedding_; }
  // The optimizer's state in bytes.
  std::size_t state_bytes() const;
  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

 private:
  void step_rows(const RowGradient& rows, double lr, std::int64_t t);

  Engine& engine_;
  comm::Communicator& group_;
  ShardedParams params_;
  const StateShards& shards_;
  ShardedEmbedding embedding_;
  std::unique_ptr<torch::optim::Optimizer> dense_opt_;
  std::unique_ptr<LazyAdamW> embed_opt_;  // adamw only: moments of this rank's rows
  double weight_decay_;
  bool grads_ready_ = false;  // the pieces' gradients were reduce-scattered for this step
};

}  // namespace atl::train
