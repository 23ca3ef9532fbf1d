// The trainer's run after its settings were checked: atl::train::train (trainer.h) is check_run
// (settings.h) then this. Linked in (train_linked.cpp: atoll-smpi, the tests) or loaded with the
// trainer module (trainer_module.cpp, build/atoll-trainer.so: build/atoll, which starts without
// LibTorch and loads it only to train). Collective.
#pragma once

#include "atoll/comm/communicator.h"
#include "atoll/train/trainer.h"

namespace atl::train {

int run_checked(comm::Communicator& comm, const TrainConfig& config);

}  // namespace atl::train
