// A training step's own work, apart from synchronization: the rank's data, the forward and
// backward pass, a local step's gradient (a worker's own, or its shard group's average under the
// 2-D mesh) and what a non-finite gradient does. Private to src/train.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "atoll/comm/communicator.h"
#include "atoll/sparse/sparse_gradient.h"
#include "atoll/train/corpus.h"
#include "atoll/train/trainer.h"
#include "ddp.h"
#include "embedding_rows.h"
#include "engine.h"
#include "layer_events.h"
#include "mesh.h"
#include "nonfinite.h"
#include "step_timer.h"

namespace atl::train {

// Every rank reads the corpus' training documents for the vocabulary and keeps its shard; word
// ids must mean the same on every rank (a host whose corpus differs would train other words).
// Collective; refused on every rank if the ranks' vocabularies differ.
RankData load_data(comm::Communicator& comm, const TrainConfig& cfg);

// This rank's forward and backward pass on its batch of `step` (the hooks see every unit: an
// overlapped synchronization completes inside the forward pass; simulated compute is charged per
// unit). Returns the loss.
torch::Tensor forward_backward(Engine& engine, LayerEvents& events, const RankData& data,
                               const TrainConfig& cfg, int step, int rank);

// A local step's gradient: under the 2-D mesh its shard group's average (and the loss, the
// group's mean); else this worker's own, with no collective (the loss logged is rank 0's).
// `nonfinite` names a NaN or infinity in the worker's gradient (its group agrees on it).
template <class Index>
RowGradient worker_gradient(Mesh& mesh, std::optional<DataParallel<Index>>& group_ddp,
                            const Engine& engine, int rank, StepTimer& timer, int step,
                            sparse::SparseGradient<Index> local, double loss, double& mean_loss,
                            std::optional<NonFinite>& nonfinite);

// A step whose gradient held a NaN or an infinity: --nonfinite fail ends the run (every rank at
// once when they agreed on it: `agreed`; else this worker's process ends the job), skip reports it
// (`reporter`: the rank that prints) and the caller takes no optimizer step.
void on_nonfinite(const TrainConfig& cfg, const NonFinite& bad, int step, bool agreed,
                  bool reporter);

}  // namespace atl::train
