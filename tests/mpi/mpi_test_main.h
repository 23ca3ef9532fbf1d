// The main() of the MPI gtest programs (mpirun and SMPI): only rank 0 prints progress, every rank
// reports its own failures, a fatal failure (ASSERT_*) ends the job on every rank at once (it
// returns from the test on one rank only, and its peers would wait in the next collective), and
// the exit status is the same on every rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#include "atoll/comm/communicator.h"

namespace atl::testing {

inline int run_mpi_tests(int argc, char** argv, comm::Communicator*& global) {
  ::testing::InitGoogleTest(&argc, argv);
  comm::MpiRuntime runtime(&argc, &argv);
  auto comm = comm::Communicator::world();
  global = &comm;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (comm.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    struct FailurePrinter : ::testing::EmptyTestEventListener {
      int rank;
      explicit FailurePrinter(int r) : rank(r) {}
      void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (r.failed())
          std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank, r.file_name(), r.line_number(),
                       r.summary());
      }
    };
    listeners.Append(new FailurePrinter(comm.rank()));
  }
  // After the printers (appended last), so the failure is printed first.
  struct AbortOnFatalFailure : ::testing::EmptyTestEventListener {
    int rank;
    explicit AbortOnFatalFailure(int r) : rank(r) {}
    void OnTestPartResult(const ::testing::TestPartResult& r) override {
      if (!r.fatally_failed()) return;
      std::fprintf(stderr, "[rank %d] fatal assertion failed (%s:%d): ending the job\n", rank,
                   r.file_name() ? r.file_name() : "?", r.line_number());
      std::fflush(stderr);
      std::fflush(stdout);
      comm::MpiRuntime::abort_job(1);
    }
  };
  listeners.Append(new AbortOnFatalFailure(comm.rank()));
  const int failed = RUN_ALL_TESTS();
  global = nullptr;
  return comm.allreduce_value<std::int32_t>(failed, comm::ReduceOp::max);
}

}  // namespace atl::testing
