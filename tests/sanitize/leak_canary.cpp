// The sanitizer suite's canary (tests/sanitize/run.sh): a program that runs MPI as atoll does and
// loses one allocation of its own. LeakSanitizer must report exactly that leak, and no other: so
// the suppressions (lsan.supp) hide Open MPI's allocations without hiding atoll's.
#include <cstdio>
#include <vector>

#include "atoll/comm/communicator.h"

namespace {
std::vector<int>* volatile lost = nullptr;
}

int main(int argc, char** argv) {
  atl::comm::MpiRuntime mpi(&argc, &argv);
  atl::comm::Communicator world = atl::comm::Communicator::world();
  std::printf("rank %d of %d: losing 4000 bytes\n", world.rank(), world.size());
  lost = new std::vector<int>(1000);
  lost = nullptr;
  return 0;
}
