// The dense parameters sharded over the 2-D mesh's shard group (ZeRO stage 3): between steps a
// rank holds only its pieces of them (the master values, local_sgd_shards.h's layout: per unit
// 1/S of the unit's range) and the model's dense parameters are released (empty tensors). Before
// unit u's forward compute, gather_unit(u) all-gathers the unit's pieces into its parameters; they
// stay until the step's optimizer update (its backward needs them: LibTorch has no module hooks to
// re-gather a unit for its backward, so a unit gathered for the forward pass is kept, and a step's
// peak holds the whole model), then release() frees them and their gradients. Anything that needs
// the whole model outside a step (validation, checkpoints) gathers all units and releases after.
// The embedding is sharded by sharded_embedding.h. Private to src/train.
#pragma once

#include <torch/torch.h>

#include <span>
#include <vector>

#include "atoll/comm/communicator.h"
#include "local_sgd_shards.h"

namespace atl::train {

class ShardedParams {
 public:
  // `dense`: the model's dense parameters in flat order; `units`: each unit's range of them.
  // Takes this rank's pieces from the model (whole at this point).
  ShardedParams(std::vector<torch::Tensor> dense, std::vector<StateShards::Range> units,
                std::int64_t embedding_rows, std::int64_t embedding_width,
                comm::Communicator& group);

  const StateShards& shards() const { return shards_; }
  // This rank's pieces cut at parameter boundaries (what the optimizer steps), and each one's
  // parameter.
  std::vector<torch::Tensor>& pieces() { return pieces_; }
  std::size_t param_of(std::size_t piece) const { return parts_[piece].param; }
  std::int64_t offset_of(std::size_t piece) const { return parts_[piece].offset; }
  // Where a piece lies in this rank's local buffers (local_sgd_shards.h: its pieces in unit order).
  std::size_t local_offset_of(std::size_t piece) const {
    return shards_.local(parts_[piece].unit).begin + parts_[piece].at;
  }

  // The pieces take the model's values (after a checkpoint was loaded into the model, which is
  // then whole).
  void adopt_model();
  // Unit u's parameters from every rank's pieces, unless they are current; with `prefetch`, the
  // next unit's all-gather is posted to move while unit u computes (only when its pieces are
  // final for this step: the caller knows). Collective over the group (every rank asks for the
  // same units in the same order).
  void gather_unit(int unit, bool prefetch = false);
  void gather_all();
  // Lets a prefetch in flight move (Open MPI progresses it only inside MPI calls).
  void progress();
  // The model's dense parameters and their gradients freed.
  void release();
  // This rank's piece of unit u (local(u).size() values), read or replaced (the unit's
  // parameters are then stale until gathered).
  void read_piece(int unit, std::span<float> out) const;
  void write_piece(int unit, std::span<const float> in);
  std::size_t bytes() const;

 private:
  struct Part {
    std::size_t param = 0;  // index into dense_
    std::int64_t offset = 0, size = 0;
    int unit = 0;
    std::size_t at = 0;  // offset within this rank's piece of the unit
  };
  std::vector<torch::Tensor> dense_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<std::size_t> starts_;               // each parameter's offset in the flat buffer
  std::vector<std::vector<std::size_t>> params_;  // per unit, its parameters
  StateShards shards_;
  comm::Communicator& group_;
  std::vector<Part> parts_;
  std::vector<torch::Tensor> pieces_;
  std::vector<bool> current_;  // per unit: the model holds its gathered parameters

  // A prefetched unit's all-gather in flight (unit −1: none).
  struct Pending {
    int unit = -1;
    std::vector<float> send, recv;
    std::vector<std::size_t> counts;
    comm::Request request;
  };
  Pending pending_;
  void post(int unit);
  void install(int unit, const std::vector<float>& all);
  void drop_pending();  // waits for a posted all-gather and discards it
};

}  // namespace atl::train
