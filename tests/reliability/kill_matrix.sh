#!/usr/bin/env bash
# The kill matrix (issue 17): 4 ranks of `atoll bench sync` and `atoll train`; one rank (1; 0 at
# the checkpoint, where rank 0 writes the main file last) raises SIGKILL or SIGSTOP at one phase (--inject-fault kill|stop:RANK:PHASE:STEP) and the test asserts
# that every process is gone within --comm-timeout + 30 s of the fault, that the exit status and
# message name the failure (SIGKILL: mpirun's report of the signal; SIGSTOP: the watchdog's exit
# 86 naming the operation), and, for train, that the newest complete checkpoint loads and --resume
# reproduces the uninterrupted run (losses and validation equal from there on).
# usage: kill_matrix.sh ATOLL ci|full [JSONL]   (ci: one case per phase; full: every phase x
# {kill, stop} x {bench, train}; JSONL: one line per case)
set -uo pipefail
atoll=$1
mode=${2:-ci}
jsonl=${3:-}
source "$(dirname "$0")/../train/lib.sh"
timeout_s=10
np=4
train_args=("${common[@]}" --steps 8 --eval-every 4 --warmup-steps 2 --checkpoint-every 2
  --keep-checkpoints 10 --comm-timeout "$timeout_s")
bench_args=(bench sync --schemes zen --elements 400000 --density 0.01 --repeat 6 --warmup 0
  --comm-timeout "$timeout_s")

# The uninterrupted runs that resumed ones must reproduce.
declare -A strategy_args=([ddp]="--strategy ddp" [diloco]="--strategy diloco --sync-every 2 --sync-warmup-steps 2")
for s in ddp diloco; do
  # shellcheck disable=SC2086
  run $np "$atoll" "${train_args[@]}" ${strategy_args[$s]} --out "$tmp/ref-$s" >/dev/null ||
    fail "uninterrupted $s run exited $?"
done

# one_case TOOL SIGNAL PHASE STRATEGY: runs it, checks it, appends a JSON line.
one_case() {
  local tool=$1 signal=$2 phase=$3 strategy=$4 name="$1 $2 at $3 ($4)" dir="$tmp/$1-$2-$3-$4" step=5
  # step 4's checkpoint is complete, step 6's is cut; diloco synchronizes at steps 4, 6, 8
  [ "$phase" = checkpoint ] || [ "$phase" = outer_sync ] && step=6
  [ "$tool" = bench ] && step=3
  local rank=1 cmd
  [ "$phase" = checkpoint ] && rank=0  # rank 0 writes the main file: its fault cuts the checkpoint
  local fault="$signal:$rank:$phase:$step"
  mkdir -p "$dir"
  if [ "$tool" = bench ]; then
    cmd=("$atoll" "${bench_args[@]}" --inject-fault "$fault")
  else
    # shellcheck disable=SC2206
    cmd=("$atoll" "${train_args[@]}" ${strategy_args[$strategy]} --out "$dir" --inject-fault "$fault")
  fi
  mpirun --oversubscribe -np $np "${cmd[@]}" >"$dir/log" 2>&1 &
  local launcher=$! t0=$SECONDS t_fault="" status
  while kill -0 "$launcher" 2>/dev/null; do
    [ -z "$t_fault" ] && grep -q "raising SIG" "$dir/log" && t_fault=$SECONDS
    [ $((SECONDS - t0)) -gt 300 ] && { kill -KILL "$launcher"; break; }
    sleep 0.2
  done
  wait "$launcher"
  status=$?
  [ -z "$t_fault" ] && grep -q "raising SIG" "$dir/log" && t_fault=$SECONDS
  local took=$((SECONDS - ${t_fault:-$t0})) leftover
  leftover=$(pgrep -f -- "$fault" | wc -l)
  local named=no
  if [ "$signal" = kill ]; then
    grep -qiE "signal 9|killed" "$dir/log" && [ "$status" -ne 0 ] && named=yes
  else
    grep -q "has not completed after" "$dir/log" && [ "$status" -eq 86 ] && named=yes
  fi
  local resumed=n/a
  if [ "$tool" = train ]; then
    resumed=no
    local from  # the newest complete checkpoint: its main file (the rank files come first)
    from=$(find "$dir/checkpoints" -name 'step-*.ckpt' ! -name '*.rank-*' 2>/dev/null | sort | tail -1 |
      grep -o 'step-[0-9]*' | grep -o '[1-9][0-9]*$')
    # shellcheck disable=SC2086
    if run $np "$atoll" "${train_args[@]}" ${strategy_args[$strategy]} --out "$dir" --resume \
      >"$dir/resume.log" 2>&1 && same loss "$dir/metrics.jsonl" "$tmp/ref-$strategy/metrics.jsonl" \
      >/dev/null 2>&1; then
      # the resumed run's lines (after the checkpoint) against the reference's
      if compare loss "$dir/metrics.jsonl" "$tmp/ref-$strategy/metrics.jsonl" 0 "$((from + 1))" >/dev/null &&
        compare val_loss "$dir/metrics.jsonl" "$tmp/ref-$strategy/metrics.jsonl" 0 "$((from + 1))" >/dev/null; then
        resumed="yes (from step $from)"
        # a fault while writing step 6's checkpoint leaves it incomplete: step 4's is the newest
        [ "$phase" = checkpoint ] && [ "$from" != 4 ] && resumed="no (the cut checkpoint $from was taken)"
      fi
    fi
  fi
  local ok=yes
  if [ -z "$t_fault" ] || [ "$took" -gt $((timeout_s + 30)) ] || [ "$leftover" -ne 0 ] ||
    [ "$named" != yes ] || [ "${resumed:0:2}" = no ]; then
    ok=no
    fail "$name: fault seen: ${t_fault:+yes}, exit $status after ${took} s, $leftover processes left, failure named: $named, resume: $resumed"
    tail -5 "$dir/log"
  else
    echo "ok   $name: exit $status, gone ${took} s after the fault, resume: $resumed"
  fi
  if [ -n "$jsonl" ]; then
    printf '{"tool": "%s", "signal": "%s", "phase": "%s", "strategy": "%s", "fault": "%s", "exit": %d, "seconds_to_exit": %d, "processes_left": %d, "failure_named": "%s", "resume": "%s", "ok": "%s", "message": %s}\n' \
      "$tool" "$signal" "$phase" "$strategy" "$fault" "$status" "$took" "$leftover" "$named" "$resumed" "$ok" \
      "$(grep -m1 -E "has not completed after|signal 9|Killed" "$dir/log" | cut -c1-200 | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')" >>"$jsonl"
  fi
}

if [ "$mode" = ci ]; then  # one case per phase, both signals and both tools covered
  one_case bench kill push -
  one_case train stop aggregate ddp
  one_case bench stop pull -
  one_case train kill dense_sync ddp
  one_case train stop outer_sync diloco
  one_case train kill checkpoint ddp
else
  for signal in kill stop; do
    for phase in push aggregate pull; do one_case bench "$signal" "$phase" -; done
    for phase in push aggregate pull dense_sync checkpoint; do one_case train "$signal" "$phase" ddp; done
    one_case train "$signal" outer_sync diloco
    one_case train "$signal" checkpoint diloco
  done
fi
[ "$failures" -eq 0 ] && echo "kill matrix ($mode): all passed" || echo "kill matrix ($mode): $failures failed"
exit $((failures > 0))
