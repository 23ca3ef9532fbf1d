// The simulator's shared-CPU model (src/comm/smpi_testbed_models.cpp) under SMPI: 4 ranks on a
// platform whose hosts share 2 cores (tests/sim/shared_cpu_test.sh runs it). Each rank's work is a
// fixed number of simulated seconds at full speed, so the expected times are exact: k ranks
// computing at once run at min(1, 2/k), and a rank speeds up as soon as the others finish.
#include <gtest/gtest.h>

#include <cstdio>

#include "atoll/comm/communicator.h"
#include "atoll/comm/smpi_testbed_models.h"

namespace {

atl::comm::Communicator* g_comm = nullptr;

// Simulated seconds this rank takes to do `work` seconds of full-speed computation, started by
// all ranks together after a barrier.
double timed_work(double work) {
  auto& comm = *g_comm;
  comm.barrier();
  const double t0 = comm.wtime();
  if (work > 0) {
    comm.fixed_compute_begin();
    comm.fixed_compute_end(work);
  }
  const double t = comm.wtime() - t0;
  comm.barrier();
  return t;
}

constexpr double kTol = 1e-3;  // barriers release ranks microseconds apart

TEST(SharedCpu, FourRanksOnTwoCoresRunAtHalfSpeed) {
  ASSERT_EQ(g_comm->size(), 4);
  EXPECT_NEAR(timed_work(1.0), 2.0, kTol);
}

TEST(SharedCpu, ALoneRankGetsAWholeCore) {
  const double t = timed_work(g_comm->rank() == 0 ? 1.0 : 0.0);
  if (g_comm->rank() == 0) {
    EXPECT_NEAR(t, 1.0, kTol);
  }
}

TEST(SharedCpu, TwoRanksGetACoreEach) {
  const double t = timed_work(g_comm->rank() < 2 ? 1.0 : 0.0);
  if (g_comm->rank() < 2) {
    EXPECT_NEAR(t, 1.0, kTol);
  }
}

TEST(SharedCpu, ThreeRanksShareTwoCores) {
  const double t = timed_work(g_comm->rank() < 3 ? 1.0 : 0.0);
  if (g_comm->rank() < 3) {
    EXPECT_NEAR(t, 1.5, kTol);
  }
}

TEST(SharedCpu, SpeedRisesWhenOthersFinish) {
  // Rank 0 has 2 s of work, the others 1 s: at half speed the others finish at 2 s, when rank 0
  // has done 1 s; its last second then runs alone at full speed.
  const double t = timed_work(g_comm->rank() == 0 ? 2.0 : 1.0);
  EXPECT_NEAR(t, g_comm->rank() == 0 ? 3.0 : 2.0, kTol);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  atl::comm::MpiRuntime runtime(&argc, &argv);
  auto comm = atl::comm::Communicator::world();
  g_comm = &comm;
  atl::comm::install_testbed_models(comm.rank(), comm.size());
  comm.barrier();
  if (comm.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  return comm.allreduce_value<std::int32_t>(failed, atl::comm::ReduceOp::max);
}
