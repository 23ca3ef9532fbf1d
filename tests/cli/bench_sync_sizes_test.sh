#!/usr/bin/env bash
# `atoll bench sync --schemes all --verify` at world sizes that are not powers of two (SparCML
# folds there, so ranks record different phases) and on tiny or extreme inputs: M = 1, M below the
# world size, densities 0 and 1. Every scheme's row must say verified, on Open MPI (np 3, 5, 6, 7)
# and under SMPI (12 ranks).
# usage: bench_sync_sizes_test.sh ATOLL_BINARY SIMULATE_SCRIPT
set -uo pipefail
atoll=$1 simulate=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
schemes=9  # rows per run: every scheme of `all`
failures=0

# check NAME OUTPUT STATUS: STATUS 0, $schemes JSON rows, all verified.
check() {
  local name=$1 out=$2 rc=$3 rows good
  rows=$(grep -c '^{"' <<<"$out")
  good=$(grep -c '"verified":true' <<<"$out")
  if [ "$rc" -eq 0 ] && [ "$rows" -eq $schemes ] && [ "$good" -eq $schemes ]; then
    echo "ok   $name"
  else
    echo "FAIL $name: exit status $rc, $rows rows, $good verified"; echo "$out"
    failures=$((failures + 1))
  fi
}

for np in 3 5 6 7; do
  for input in "1 0" "1 1" "2 1" "$((np - 1)) 0.5" "1000 0" "1000 1" "1000 0.01" "10007 0.05"; do
    read -r m d <<<"$input"
    values_kinds="integer"  # exact sums; float values on the inputs with real sums to round
    [ "$m" -ge 1000 ] && [ "$d" != 0 ] && values_kinds="integer normal"
    for values in $values_kinds; do
      out=$(timeout 120 mpirun --oversubscribe -np "$np" "$atoll" bench sync --schemes all \
        --elements "$m" --density "$d" --values "$values" --repeat 1 --warmup 0 --verify --json 2>&1)
      check "np=$np M=$m density=$d $values" "$out" $?
    done
  done
done
# 64-bit indices once per size that folds.
for np in 3 6; do
  out=$(timeout 120 mpirun --oversubscribe -np "$np" "$atoll" bench sync --schemes all \
    --elements 5000 --density 0.02 --index-bits 64 --repeat 2 --verify --json 2>&1)
  check "np=$np 64-bit" "$out" $?
done
# Under SMPI at 12 ranks (the case that deadlocked), and the human-readable table.
out=$(timeout 300 "$simulate" cluster-16x25g 12 -- bench sync --schemes all --elements 100000 \
  --density 0.01 --repeat 1 --verify --json 2>&1)
check "smpi 12 ranks" "$out" $?
if out=$(timeout 120 mpirun --oversubscribe -np 3 "$atoll" bench sync --elements 3000 --verify \
    --repeat 1 2>&1) && [ "$(grep -cE ' yes$' <<<"$out")" -eq $schemes ]; then
  echo "ok   np=3 table"
else
  echo "FAIL np=3 table"; echo "$out"; failures=$((failures + 1))
fi
exit $((failures > 0))
