// atl::train::train where the trainer is linked in (atoll-smpi, the tests): the settings checked
// on every rank, then the run. build/atoll loads it instead (trainer_loader.cpp).
#include "atoll/train/trainer.h"
#include "settings.h"
#include "train_entry.h"

namespace atl::train {

int train(comm::Communicator& comm, const TrainConfig& cfg) {
  check_run(comm, cfg);
  return run_checked(comm, cfg);
}

}  // namespace atl::train
