// build/atoll-trainer.so: the LibTorch trainer as a module that build/atoll loads only for
// `atoll train` (trainer_loader.cpp), so that its other subcommands start without LibTorch's
// ~300 libraries (about a second of CPU per process). Its references to the core resolve to the
// executable's copy (exported, ENABLE_EXPORTS): one communicator, one watchdog, one set of globals.
#include "train_entry.h"

extern "C" __attribute__((visibility("default"))) int atoll_trainer_run(
    atl::comm::Communicator& comm, const atl::train::TrainConfig& cfg) {
  return atl::train::run_checked(comm, cfg);
}
