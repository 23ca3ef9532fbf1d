# Sourced by the tests that expect every rank to refuse (tests/cli/bad_input.sh,
# tests/train/lib.sh, tests/train/train_test.sh): each rank runs to its own end under
# tests/each_rank_exit.sh, which says its exit status (and why that is faster and stricter).
each_rank_exit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/each_rank_exit.sh
# mpirun_each SECONDS MPIRUN_ARGS...: mpirun within SECONDS (status 124 past it) with Open MPI's
# abort of the other ranks at the first non-zero exit off; stdout and stderr together. Put
# "$each_rank_exit" before each program in MPIRUN_ARGS.
mpirun_each() {
  local seconds=$1
  shift
  timeout "$seconds" mpirun --mca orte_abort_on_non_zero_status 0 --oversubscribe "$@" 2>&1
}
# ranks_exited OUTPUT [STATUS]: how many ranks said they exited with STATUS (extended regex;
# default: any non-zero status).
ranks_exited() {
  grep -cE "^exit status ${2:-[1-9][0-9]*} on rank [0-9]+$" <<<"$1"
}
