// The token embedding sharded over the 2-D mesh's shard group: a rank keeps only its block of
// rows (local_sgd_shards.h's layout: block g of consecutive rows on group rank g) and the model's
// table never holds the whole vocabulary. Before a forward pass the group gathers the rows its
// ranks' batches use: each rank's distinct token ids are all-gathered, their sorted union U is
// the same on every rank, the owners' rows of U are all-gathered (rank order = U's order, since
// blocks are consecutive), and the model's table becomes that compact |U| × E table with
// `Gpt::tok_rows` = U (the model maps ids to compact rows). Backward then yields the gradient of
// the compact rows; global_rows() maps them back. After the optimizer step the compact table is
// released (0 × E). Private to src/train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "atoll/comm/communicator.h"
#include "local_sgd_shards.h"
#include "model.h"

namespace atl::train {

// Sorted distinct values of `ids`.
std::vector<std::int64_t> distinct_ids(std::span<const std::int64_t> ids);

class ShardedEmbedding {
 public:
  // Takes this rank's block from the model's table (whole at this point; it stays whole until
  // the first gather or release).
  ShardedEmbedding(Gpt& model, const StateShards& shards, comm::Communicator& group);

  // This rank's rows (rows() × E), the master values the inner and outer steps update.
  torch::Tensor& block() { return block_; }
  // The model's table := the rows of the union of the group's `ids` (each rank its own).
  // Collective over the group.
  void gather(std::span<const std::int64_t> ids);
  // The same in two parts: the next batch's ids noted, then gathered when its forward pass
  // reaches the embedding (unit 0: after an overlapped synchronization has put θ̄ in the block).
  void expect(std::span<const std::int64_t> ids) { expected_ = distinct_ids(ids); }
  void gather_expected() { gather(expected_); }
  // The model's table released (0 × E, no gradient); gather() must come before the next use.
  void release();
  // Bytes of this rank's block.
  std::size_t bytes() const;

  // Checkpoint state: this rank's block (in its own file).
  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

 private:
  Gpt& model_;
  const StateShards& shards_;
  comm::Communicator& group_;
  torch::Tensor block_;
  std::vector<std::int64_t> expected_;
};

}  // namespace atl::train
