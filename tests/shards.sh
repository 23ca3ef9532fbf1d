#!/usr/bin/env bash
# Runs a one-threaded GoogleTest program as N processes at once, each one of its N shards
# (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX: every test runs in exactly one shard), on a machine
# whose cores would otherwise idle beside it: the unit tests and the SMPI golden test (16 simulated
# ranks in one process). Each shard's output is printed whole, in order, when all have ended; the
# exit status is the first failing shard's (0 if none failed).
# usage: tests/shards.sh N COMMAND [ARGS...]
set -uo pipefail
n=${1:?usage: tests/shards.sh N COMMAND [ARGS...]}
shift
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "shards.sh: N must be a positive integer, not '$n'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
for ((i = 0; i < n; i++)); do
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i "$@" >"$tmp/$i.log" 2>&1 &
  echo $! >"$tmp/$i.pid"
done
status=0
for ((i = 0; i < n; i++)); do
  wait "$(cat "$tmp/$i.pid")"
  rc=$?
  echo "==== shard $((i + 1)) of $n: exit $rc ===="
  cat "$tmp/$i.log"
  ((status == 0 && rc != 0)) && status=$rc
done
exit "$status"
