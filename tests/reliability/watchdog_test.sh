#!/usr/bin/env bash
# The collective watchdog (--comm-timeout): one rank of a job stopped (SIGSTOP, as a frozen or
# unreachable process) ends the whole job within the timeout plus a few seconds, with a message
# that names the operation and the communicator, and exit code 86; for `atoll train` (the rank
# stops itself: --inject-fault stop:RANK:STEP) and `atoll bench sync` (stopped from outside).
# A run without a fault is unchanged by the watchdog (it finishes, exit 0). usage: watchdog_test.sh ATOLL
set -uo pipefail
atoll=$1
tmp=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
trap 'pkill -KILL -f -- "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
train=(train --preset tiny --batch 4 --plot false --quiet --eval-every 0)

# expect_watchdog NAME LOG STATUS SECONDS: the job ended by the watchdog in time.
expect_watchdog() {
  local name=$1 log=$2 status=$3 took=$4
  if [ "$status" -eq 86 ] && grep -q "has not completed after" "$log" && [ "$took" -le 60 ]; then
    echo "ok   $name: exit $status after ${took} s: $(grep -m1 'has not completed' "$log" | cut -c1-150)"
  else
    fail "$name: exit $status after ${took} s"
    tail -20 "$log"
  fi
}

# 1. train: rank 1 of 3 stops after step 3; the others wait in the step's gradient allreduce.
start=$SECONDS
timeout 300 mpirun --oversubscribe -np 3 "$atoll" "${train[@]}" --steps 40 --comm-timeout 5 \
  --inject-fault stop:1:3 --out "$tmp/train" >"$tmp/train.log" 2>&1
expect_watchdog "train, rank 1 stopped" "$tmp/train.log" $? $((SECONDS - start))

# 2. bench sync: one rank stopped from outside while it repeats the schemes.
start=$SECONDS
mpirun --oversubscribe -np 3 "$atoll" bench sync --schemes zen,allreduce --elements 200000 \
  --density 0.01 --repeat 100000 --comm-timeout 5 >"$tmp/bench.log" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 1 100); do
  victim=$(pgrep -P "$launcher" -f "bench sync" | tail -1)
  [ -n "$victim" ] && grep -q . "$tmp/bench.log" 2>/dev/null && break
  sleep 0.2
done
sleep 2
if [ -n "$victim" ]; then
  kill -STOP "$victim"
  start=$SECONDS
  # A guard against a hang; its output closed, so a leftover sleep keeps no pipe of CTest open.
  ( exec >/dev/null 2>&1; sleep 120; kill -KILL "$launcher" ) &
  guard=$!
  wait "$launcher"
  status=$?
  pkill -P "$guard" 2>/dev/null; kill "$guard" 2>/dev/null
  expect_watchdog "bench sync, one rank stopped" "$tmp/bench.log" "$status" $((SECONDS - start))
else
  fail "bench sync: no rank process found under mpirun $launcher"
fi

# 3. No fault: the watchdog does not fire (a short timeout, a healthy run).
timeout 300 mpirun --oversubscribe -np 2 "$atoll" "${train[@]}" --steps 5 --comm-timeout 2 \
  --out "$tmp/healthy" >"$tmp/healthy.log" 2>&1 && ! grep -q "has not completed" "$tmp/healthy.log" &&
  echo "ok   healthy run with --comm-timeout 2: no watchdog" || { fail "healthy run"; tail "$tmp/healthy.log"; }

# 4. Bad input: a clear error on every rank.
timeout 120 mpirun --oversubscribe -np 2 "$atoll" "${train[@]}" --steps 5 --comm-timeout -1 >"$tmp/bad.log" 2>&1
if [ $? -ne 0 ] && [ "$(grep -c -- '--comm-timeout -1 must be' "$tmp/bad.log")" -eq 2 ]; then
  echo "ok   --comm-timeout -1: refused on every rank"
else
  fail "--comm-timeout -1"; cat "$tmp/bad.log"
fi

[ "$failures" -eq 0 ] || exit 1
