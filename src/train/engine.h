// One worker's model and inner optimizers: AdamW for the dense parameters (decay on matrices
// only) and the row-wise AdamW for the embedding (--optimizer adamw), or plain SGD for both
// (--optimizer sgd: no momentum, no weight decay); and the dense gradients' synchronization.
// Private to src/train.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/train/trainer.h"
#include "dense_sync.h"
#include "embedding_rows.h"
#include "lazy_adamw.h"
#include "local_sgd_shards.h"
#include "model.h"

namespace atl::train {

class ShardedOptimizer;

struct Engine {
  Gpt model;
  torch::Tensor embedding;               // model->tok->weight (sharded: the rows a step uses)
  std::int64_t vocab = 0;                // the embedding's rows (the whole table)
  std::vector<torch::Tensor> dense;      // every other parameter, in registration order
  std::vector<std::string> dense_names;  // their names ("blocks.3.fc.weight", ...)
  std::unique_ptr<torch::optim::Optimizer> dense_opt;
  std::unique_ptr<LazyAdamW> embed_opt;  // adamw only
  std::unique_ptr<DenseSync> dense_sync;
  double weight_decay = 0;
  // The 2-D mesh, sharded: the inner optimizer's state and the dense parameters split over the
  // shard group (its steps then run there; dense_opt and embed_opt stay unused and hold no
  // state). Between steps the model's dense parameters and embedding table are then released
  // (sharded_params.h, sharded_embedding.h).
  std::unique_ptr<ShardedOptimizer> sharded;

  // The same initialisation on every rank (seeded by the caller), then rank 0's parameters
  // broadcast so that ranks on different machines or library builds start identical. Collective.
  Engine(comm::Communicator& comm, const TrainConfig& config);
  ~Engine();
  // Shards the inner optimizer over `group` (before the first step and before resuming).
  void shard_optimizer(const TrainConfig& config, comm::Communicator& group);

  // One inner optimizer step at global step t (1-based) from the parameters' gradients (dense)
  // and the embedding's rows.
  void inner_step(const RowGradient& rows, double dense_lr, double embed_lr, std::int64_t t);

  // Runs f with the whole model, for the token ids `ids` (sharded: every unit and the rows of the
  // group's ids gathered first, released after). Collective over the shard group when sharded.
  void with_full_params(std::span<const std::int64_t> ids, const std::function<void()>& f);
  // Sharded: the embedding rows of the group's `ids` gathered (collective over the group).
  void gather_embedding(std::span<const std::int64_t> ids);
  // Sharded: every dense unit gathered (before a checkpoint is written), and released again.
  void gather_params();
  void release_params();
  // The embedding rows this rank keeps between steps: its block (sharded), or the whole table.
  torch::Tensor embedding_block();

  // Bytes this rank holds in the model's parameters (sharded: the embedding and its pieces of the
  // dense parameters, between steps) and in the inner optimizers' state.
  std::size_t parameter_bytes() const;
  std::size_t optimizer_state_bytes() const;

  // Checkpoint state: the model and the inner optimizers (sharded: this rank's share of their
  // state, so every rank writes its own file) (the same on every rank under ddp).
  void save(torch::serialize::OutputArchive& ar);
  void load(torch::serialize::InputArchive& ar);
  // This rank's own state under ddp: its top-k error-feedback residual (none without --topk), in
  // its per-rank file under "topk_residual" (checkpoints before issue 14 kept every rank's in the
  // main file as "topk_residual_rank<r>": `key` names which to read).
  void save_residual(torch::serialize::OutputArchive& ar) const;
  void load_residual(torch::serialize::InputArchive& ar, const std::string& key);
};

// The dense inner optimizer of --optimizer over `params` (SGD), or AdamW with weight decay on
// `decay` (the matrices) and none on `no_decay`; Engine's and the sharded optimizer's.
std::unique_ptr<torch::optim::Optimizer> dense_optimizer(const TrainConfig& config,
                                                         const std::vector<torch::Tensor>& params,
                                                         std::vector<torch::Tensor> decay,
                                                         std::vector<torch::Tensor> no_decay);
// Bytes of AdamW's moments in `optimizer`'s state (0 for SGD).
std::size_t adamw_state_bytes(const torch::optim::Optimizer& optimizer);

// Each model unit's range of the flat buffer of `engine.dense` (model.h; unit 0, the embedding,
// has none): a unit's dense parameters are consecutive in registration order.
std::vector<StateShards::Range> dense_unit_ranges(const Engine& engine, int layers);

}  // namespace atl::train
