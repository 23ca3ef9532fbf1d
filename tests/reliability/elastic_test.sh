#!/usr/bin/env bash
# Elastic resume (issue 17): `mpirun -np 4 atoll train` killed mid-run (rank 1 SIGKILLs itself at
# step 60, after the checkpoint of step 50) resumes with -np 3 from the newest checkpoint: data
# shards reassigned, the world-size change in the metrics, and a validation loss after 50 more
# steps within 2% of an uninterrupted 4-rank run's at the same step. For ddp and for diloco (a
# worker's local state: ranks beyond the new world are dropped). Also 3 -> 4 (growth) for diloco.
# usage: elastic_test.sh ATOLL
set -uo pipefail
atoll=$1
source "$(dirname "$0")/../train/lib.sh"
args=("${common[@]}" --steps 100 --eval-every 50 --checkpoint-every 50 --comm-timeout 30)

# elastic NAME NP_BEFORE NP_AFTER STRATEGY_ARGS...
elastic() {
  local name=$1 before=$2 after=$3
  shift 3
  run "$before" "$atoll" "${args[@]}" "$@" --out "$tmp/$name-ref" >/dev/null ||
    fail "$name: uninterrupted run exited $?"
  run "$before" "$atoll" "${args[@]}" "$@" --out "$tmp/$name" --inject-fault kill:1:backward:60 \
    >"$tmp/$name.log" 2>&1
  local status=$?
  [ $status -ne 0 ] || fail "$name: the killed run exited 0"
  run "$after" "$atoll" "${args[@]}" "$@" --out "$tmp/$name" --resume >"$tmp/$name-resume.log" 2>&1 ||
    { fail "$name: resume on $after ranks exited $?"; tail -5 "$tmp/$name-resume.log"; return; }
  python3 - "$tmp/$name/metrics.jsonl" "$tmp/$name-ref/metrics.jsonl" "$before" "$after" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
before, after = int(sys.argv[3]), int(sys.argv[4])
change = [j for j in lines if "resumed_from_world" in j]
val = {j["step"]: j["val_loss"] for j in lines if "val_loss" in j}
val_ref = {j["step"]: j["val_loss"] for j in ref if "val_loss" in j}
rel = abs(val[100] - val_ref[100]) / val_ref[100]
ok = (len(change) == 1 and change[0]["step"] == 51 and change[0]["world"] == after
      and change[0]["resumed_from_world"] == before and rel <= 0.02)
print(f"world change recorded at step {change[0]['step'] if change else None}: "
      f"{before} -> {after} ranks; validation at 100: {val[100]:.4f} vs {val_ref[100]:.4f} "
      f"uninterrupted ({100 * rel:.2f}%, at 50: {val.get(50, float('nan')):.4f})")
sys.exit(0 if ok else 1)
PY
  if [ $? -eq 0 ] && grep -q "elastic resume" "$tmp/$name-resume.log"; then
    echo "ok   $name"
  else
    fail "$name"; tail -3 "$tmp/$name-resume.log"
  fi
}

elastic ddp-4to3 4 3 --strategy ddp
# Outer momentum 0.5, not the default 0.9: with 0.9 (H = 5, tiny preset) validation rises from
# step 50 to 100 in the uninterrupted run, and where such a run lands depends on rounding (the 4 ->
# 3 case was 0.54% on the machine of 2026-12-01 and 2.80% on that of 2026-12-03, in the same code);
# at 0.5 it falls, and the momentum buffer is still carried across the resume.
elastic diloco-4to3 4 3 --strategy diloco --sync-every 5 --sync-warmup-steps 10 --outer-momentum 0.5
elastic diloco-3to4 3 4 --strategy diloco --sync-every 5 --sync-warmup-steps 10 --outer-momentum 0.5
# Not elastic: edit's penalty is laid out by worker: refused on every rank, naming the reason.
run 2 "$atoll" "${common[@]}" --steps 4 --checkpoint-every 2 --strategy edit --sync-every 2 \
  --out "$tmp/edit" >/dev/null || fail "edit run exited $?"
EXPECT_NP=3 expect_error edit-elastic "elastic resume .* is supported for --strategy ddp and diloco" \
  "${common[@]}" --steps 6 --strategy edit --sync-every 2 --out "$tmp/edit" --resume

[ "$failures" -eq 0 ] && echo "elastic: all passed" || echo "elastic: $failures failed"
exit $((failures > 0))
