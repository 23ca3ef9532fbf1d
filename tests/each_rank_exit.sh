#!/bin/sh
# each_rank_exit.sh PROGRAM ARGS...: runs PROGRAM ARGS as one MPI rank and says how it ended,
# "exit status S on rank R" on stderr, then exits with S. The tests that expect every rank to
# refuse run it under `mpirun --mca orte_abort_on_non_zero_status 0` (tests/each_rank.sh:
# mpirun_each, ranks_exited): each rank runs to its own end and reports it, so no rank is killed
# before it has printed its error, and mpirun skips its kill sequence (odls_base_sigkill_timeout:
# 1-2 s of every failing job) while the tests still see every rank's status.
"$@"
status=$?
echo "exit status $status on rank ${OMPI_COMM_WORLD_RANK:-?}" >&2
exit "$status"
