// comm::run_parallel under SMPI (tests/CMakeLists.txt runs it at 2 simulated ranks): SimGrid
// charges a rank the CPU time of the thread that runs it, so work on helper threads would go
// uncharged; a parallel section must be charged its wall time, no less.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "atoll/comm/communicator.h"
#include "atoll/comm/parallel.h"
#include "mpi_test_main.h"

namespace {

atl::comm::Communicator* g_comm = nullptr;
constexpr double kSpin = 0.040;  // seconds of wall time a helper's task takes

void spin_wall(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  volatile unsigned x = 0;
  while (std::chrono::steady_clock::now() < end) x = x + 1;
}

// Simulated seconds `work` takes on this rank.
template <class Work>
double simulated(Work work) {
  g_comm->barrier();
  const double t0 = g_comm->wtime();
  work();
  return g_comm->wtime() - t0;
}

TEST(ParallelCharge, APlainHelperThreadGoesUncharged) {
  // Why run_parallel charges explicitly: a helper's 40 ms, and the caller's wait in join(), are
  // not the calling thread's CPU time.
  const double t = simulated([] {
    std::thread helper([] { spin_wall(kSpin); });
    helper.join();
  });
  EXPECT_LT(t, kSpin / 4) << "SimGrid now charges helper threads: run_parallel would charge twice";
}

TEST(ParallelCharge, AParallelSectionIsChargedItsWallTime) {
  // Task 1 runs on a helper for 40 ms of wall time, task 0 on the caller returns at once.
  const double t = simulated([] {
    atl::comm::run_parallel(*g_comm, 2, 2, [](std::size_t task) {
      if (task == 1) spin_wall(kSpin);
    });
  });
  EXPECT_GE(t, kSpin);
  EXPECT_LT(t, 2 * kSpin);
}

TEST(ParallelCharge, BothThreadsBusyAreChargedOnce) {
  // Both tasks spin 40 ms at once: 40 ms of wall time, not 80 (the section is charged by the
  // clock, not by the threads' summed CPU time).
  const double t = simulated(
      [] { atl::comm::run_parallel(*g_comm, 2, 2, [](std::size_t) { spin_wall(kSpin); }); });
  EXPECT_GE(t, kSpin);
  EXPECT_LT(t, 1.5 * kSpin);
}

TEST(ParallelCharge, ATaskFailureIsRethrownAfterAllTasksEnd) {
  std::atomic<int> done = 0;
  EXPECT_THROW(atl::comm::run_parallel(*g_comm, 2, 4,
                                       [&](std::size_t task) {
                                         if (task == 2) throw std::runtime_error("task 2");
                                         ++done;
                                       }),
               std::runtime_error);
  EXPECT_EQ(done, 3);
}

}  // namespace

int main(int argc, char** argv) { return atl::testing::run_mpi_tests(argc, argv, g_comm); }
