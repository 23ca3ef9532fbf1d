#!/usr/bin/env bash
# A failed ASSERT on one rank inside a collective region of the golden test ends the job at once
# on every rank (exit status non-zero, well before any timeout), with the failure printed.
# usage: fatal_failure_test.sh GOLDEN_TEST_BINARY
set -uo pipefail
binary=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
for np in 1 3; do
  start=$(date +%s)
  out=$(timeout 60 mpirun --oversubscribe -np "$np" "$binary" --gtest_also_run_disabled_tests \
    --gtest_filter='GoldenSelfTest.*' 2>&1)
  rc=$? elapsed=$(($(date +%s) - start))
  if [ $rc -eq 124 ]; then
    echo "FAIL np=$np: hung (killed after 60 s)"; failures=$((failures + 1))
  elif [ $rc -eq 0 ]; then
    echo "FAIL np=$np: exit status 0"; echo "$out"; failures=$((failures + 1))
  elif ! grep -q "deliberate failure on the last rank" <<<"$out" \
    || ! grep -q "fatal assertion failed" <<<"$out"; then
    echo "FAIL np=$np: the failure was not printed"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok   np=$np: ended with status $rc after ${elapsed} s"
  fi
done
exit $((failures > 0))
