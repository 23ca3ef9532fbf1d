// An SMPI program that fails on purpose, for tests/sim/simulate_failures_test.sh: scripts/simulate
// must exit non-zero, naming the failure, for each mode but `ok`. Raw MPI on purpose: the test is
// about smpirun and the script, not the communicator layer.
// usage (under smpirun, 2+ ranks): simulate_failures ok | deadlock | fail | throw | silent |
//                                   truncate | abort | refused
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* mode = argc > 1 ? argv[1] : "ok";
  if (std::strcmp(mode, "deadlock") == 0 && rank == 0) {
    int value = 0;  // rank 1 never sends
    MPI_Recv(&value, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  if (std::strcmp(mode, "truncate") == 0 && rank < 2) {
    // Rank 0 sends two ints to a one-int buffer: MPI_ERR_TRUNCATE, under an error handler that
    // returns (so the program itself would go on as if nothing happened).
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int values[2] = {1, 2};
    if (rank == 0) MPI_Send(values, 2, MPI_INT, 1, 0, MPI_COMM_WORLD);
    if (rank == 1) MPI_Recv(values, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  if (std::strcmp(mode, "fail") == 0 && rank == 1) {
    std::fprintf(stderr, "rank 1: failing on purpose\n");
    return 3;  // without MPI_Finalize, like a rank that gives up
  }
  if (std::strcmp(mode, "throw") == 0 && rank == 1) throw std::runtime_error("thrown on purpose");
  if (std::strcmp(mode, "refused") == 0) {
    // Alltoallv `pair` (pinned by the test; SimGrid 3.32's `ompi` selector also picks it at 3
    // ranks) throws at sizes that are not powers of two; a program that catches that and goes on
    // still exits 0.
    int counts[3] = {1, 1, 1}, displs[3] = {0, 1, 2}, send[3] = {0, 0, 0}, recv[3] = {0, 0, 0};
    try {
      MPI_Alltoallv(send, counts, displs, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: caught: %s\n", rank, e.what());
    }
  }
  if (std::strcmp(mode, "abort") == 0) {
    // Every rank has printed a result, then fails and ends the job as `atoll` does on a fatal error
    // (smpirun itself exits 0 then): the output alone does not tell the run failed.
    std::printf("rank %d: result 42\n", rank);
    std::fprintf(stderr, "rank %d: aborting on purpose\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (std::strcmp(mode, "silent") != 0) std::printf("rank %d: result 42\n", rank);
  MPI_Finalize();
  return 0;
}
