// Checkpoints of a training run: resuming from one (--resume, --resume-from) and writing one.
// Private to src/train.
#pragma once

#include "atoll/comm/communicator.h"
#include "atoll/train/trainer.h"
#include "checkpoint.h"
#include "engine.h"
#include "local_sgd.h"

namespace atl::train {

class SiteTraining;

// Loads the checkpoint to resume from (the newest in out/checkpoints, or --resume-from) on every
// rank; returns its step (aedit: rank 0's step count) and sets `own_step` to this rank's. Refuses,
// on every rank, what this run cannot continue. `sites` (training across sites): each site's
// model and state from its own file. `saved_world`: the ranks that wrote the checkpoint (0:
// unknown); when it differs from comm's, an elastic resume (checkpoint.h: elastic). Collective.
template <class Index>
int resume(comm::Communicator& comm, const TrainConfig& cfg, Engine& engine,
           LocalSgd<Index>* diloco, SiteTraining* sites, const RunRecord& this_run, int& own_step,
           int& saved_world);

// Writes the checkpoint named after `step` (aedit: rank 0's step count); each rank's own file
// records its own step count `own_step`. `outer`: the communicator local SGD synchronizes over.
// Collective.
template <class Index>
void save_checkpoint(comm::Communicator& comm, comm::Communicator& outer, const TrainConfig& cfg,
                     Engine& engine, LocalSgd<Index>* diloco, const SiteTraining* sites,
                     const RunRecord& this_run, int step, int own_step);

}  // namespace atl::train
