// `atoll train` in a binary built without LibTorch (cmake -DATOLL_TRAINER=OFF: the sanitizer
// suite's CLI build, tests/sanitize/run.sh --cli): the settings are checked as in the full binary,
// on every rank, then the run is refused, saying why. Every other subcommand is complete there.
#include <string>

#include "atoll/train/trainer.h"
#include "settings.h"

namespace atl::train {

int train(comm::Communicator& comm, const TrainConfig& cfg) {
  check_run(comm, cfg);
  comm.agree(std::string(
      "this atoll was built without the LibTorch trainer (cmake -DATOLL_TRAINER=OFF); the "
      "settings are valid, but nothing is trained"));
  return 2;  // not reached: agree throws on every rank
}

}  // namespace atl::train
