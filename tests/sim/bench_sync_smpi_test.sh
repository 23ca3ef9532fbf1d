#!/usr/bin/env bash
# `atoll bench sync --schemes all --verify` under scripts/simulate at NP ranks (a small input): the
# run succeeds and every scheme's row says verified. At world sizes that are not powers of two
# SMPI's own alltoall(v) algorithms refused the run (SimGrid 3.32's `pair` at 3 ranks), and the
# ranks' MPI_Abort left smpirun's exit status 0 with the first schemes' rows already printed.
# usage: bench_sync_smpi_test.sh SIMULATE_SCRIPT NP
set -uo pipefail
simulate=$1 np=$2
schemes=9  # rows of `--schemes all`
out=$(timeout 120 "$simulate" cluster-16x25g "$np" -- bench sync --schemes all --elements 20000 \
  --density 0.01 --values integer --repeat 1 --warmup 0 --verify --json 2>&1)
rc=$?
rows=$(grep -c '^{"' <<<"$out")
good=$(grep -c '"verified":true' <<<"$out")
if [ "$rc" -eq 0 ] && [ "$rows" -eq $schemes ] && [ "$good" -eq $schemes ]; then
  echo "ok   smpi np=$np: $schemes schemes verified"
  exit 0
fi
echo "FAIL smpi np=$np: exit status $rc, $rows rows, $good verified"
echo "$out"
exit 1
