#!/usr/bin/env bash
# Local SGD (--strategy diloco, edit) end to end on 4 ranks: with H = 1, outer lr 1, no momentum
# and plain SGD inside, edit (layer-wise sync overlapped with the forward pass) is synchronous SGD
# (validation losses equal ddp's); resumed runs continue exactly (per-rank replicas, θ̄, momentum,
# the penalty's detector); edit --no-penalty, with and without overlap, is diloco; the timeline
# shows each unit's sync posted ahead of its use; it learns; a corrupted worker is dropped; bad
# input errors on every rank. usage: localsgd_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
source "$(dirname "$0")/lib.sh"

# 1. Exactness: edit (overlapped) with H = 1, outer lr 1, momentum 0, no penalty, inner SGD ==
# ddp with SGD, step for step.
sgd=("${common[@]}" --steps 20 --optimizer sgd --lr 0.05 --embed-lr 0.05 --warmup-steps 0
  --eval-every 1)
run 4 "$atoll" "${sgd[@]}" --out "$tmp/ddp" >/dev/null 2>&1 || fail "ddp sgd run"
if run 4 "$atoll" "${sgd[@]}" --strategy edit --sync-every 1 --sync-warmup-steps 0 --outer-lr 1 \
    --outer-momentum 0 --no-penalty --out "$tmp/edit1" >/dev/null 2>&1 &&
  msg=$(compare val_loss "$tmp/ddp/metrics.jsonl" "$tmp/edit1/metrics.jsonl" 1e-5); then
  # (validation after every step: the training loss logged under local SGD is rank 0's own)
  echo "ok   edit H=1 == ddp (sgd): validation losses after every step, $msg"
else
  fail "edit H=1 == ddp (sgd): ${msg:-run failed}"
fi

# 2. Resume between two synchronizations (step 10 of H = 4 after 2 warm-up steps) is exact.
dl=("${common[@]}" --steps 24 --strategy diloco --sync-every 4 --sync-warmup-steps 2
  --eval-every 4 --checkpoint-every 5 --keep-checkpoints 10)
run 4 "$atoll" "${dl[@]}" --out "$tmp/full" >/dev/null 2>&1 || fail "diloco run"
[ -f "$tmp/full/checkpoints/step-00000010.rank-00003.ckpt" ] ||
  fail "no per-rank checkpoint files: $(ls "$tmp/full/checkpoints/")"
if run 4 "$atoll" "${dl[@]}" --out "$tmp/resumed" \
    --resume-from "$tmp/full/checkpoints/step-00000010.ckpt" >/dev/null 2>&1 &&
  msg=$(compare loss "$tmp/full/metrics.jsonl" "$tmp/resumed/metrics.jsonl" 1e-6 11) &&
  msg2=$(compare val_loss "$tmp/full/metrics.jsonl" "$tmp/resumed/metrics.jsonl" 1e-6 11); then
  echo "ok   diloco resume mid-interval: losses $msg; validation $msg2"
else
  fail "diloco resume mid-interval: ${msg:-resumed run failed} ${msg2:-}"
fi

# 2a. A checkpoint's main file lists its rank files' checksums (the manifest): a rank file from
# another checkpoint is refused on every rank, naming it.
mkdir -p "$tmp/mixed/checkpoints"
cp "$tmp/full/checkpoints/step-00000010."* "$tmp/mixed/checkpoints/"
cp "$tmp/full/checkpoints/step-00000015.rank-00001.ckpt" \
  "$tmp/mixed/checkpoints/step-00000010.rank-00001.ckpt"
EXPECT_NP=4 expect_error manifest "step-00000010.rank-00001.ckpt.*belongs to another checkpoint" \
  "${dl[@]}" --out "$tmp/mixed-out" --resume-from "$tmp/mixed/checkpoints/step-00000010.ckpt"

# 2b. edit (penalty on, overlapped) resumed mid-interval (step 15: 13 local steps, H = 4) is exact.
ed=("${common[@]}" --steps 24 --strategy edit --sync-every 4 --sync-warmup-steps 2 --eval-every 4
  --checkpoint-every 5 --keep-checkpoints 10 --ewma-warmup 2)
run 4 "$atoll" "${ed[@]}" --out "$tmp/edit-full" >/dev/null 2>&1 || fail "edit run"
if run 4 "$atoll" "${ed[@]}" --out "$tmp/edit-resumed" \
    --resume-from "$tmp/edit-full/checkpoints/step-00000015.ckpt" >/dev/null 2>&1 &&
  msg=$(compare loss "$tmp/edit-full/metrics.jsonl" "$tmp/edit-resumed/metrics.jsonl" 1e-6 16) &&
  msg2=$(compare val_loss "$tmp/edit-full/metrics.jsonl" "$tmp/edit-resumed/metrics.jsonl" 1e-6 16)
then
  echo "ok   edit resume mid-interval: losses $msg; validation $msg2"
else
  fail "edit resume mid-interval: ${msg:-resumed run failed} ${msg2:-}"
fi

# 3. It learns: validation loss falls with H = 5 (AdamW inside, outer Nesterov).
if run 4 "$atoll" "${common[@]}" --steps 40 --strategy diloco --sync-every 5 --eval-every 20 \
    --out "$tmp/learn" >/dev/null 2>&1 &&
  python3 - "$tmp/learn/metrics.jsonl" <<'PY'; then
import json, sys
v = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l]
print(f"ok   diloco learns: validation loss {v[0]:.3f} -> {v[-1]:.3f}")
sys.exit(0 if v[-1] < v[0] - 0.5 else 1)
PY
  :
else
  fail "diloco did not learn"
fi

# 4. edit --no-penalty is diloco (30 steps at H = 5), with overlap switched off and on (overlap
# moves the same operations into the next forward pass); the overlapped run's timeline.
h5=("${common[@]}" --steps 30 --sync-every 5 --eval-every 10)
run 4 "$atoll" "${h5[@]}" --strategy diloco --out "$tmp/h5-diloco" >/dev/null 2>&1 || fail "diloco H=5"
for mode in no-overlap overlap; do
  flag=()
  [ "$mode" = no-overlap ] && flag=(--no-overlap)
  if run 4 "$atoll" "${h5[@]}" --strategy edit --no-penalty "${flag[@]}" --sync-prefetch 1 \
      --out "$tmp/h5-$mode" \
      --timeline "$tmp/h5-$mode.timeline" >/dev/null 2>&1 &&
    msg=$(compare loss "$tmp/h5-diloco/metrics.jsonl" "$tmp/h5-$mode/metrics.jsonl" 1e-6) &&
    msg2=$(compare val_loss "$tmp/h5-diloco/metrics.jsonl" "$tmp/h5-$mode/metrics.jsonl" 1e-6); then
    echo "ok   edit --no-penalty ($mode) == diloco: losses $msg; validation $msg2"
  else
    fail "edit --no-penalty ($mode) == diloco: ${msg:-run failed} ${msg2:-}"
  fi
done
# Timeline: every rank, step and unit computed forward and backward; with overlap, the syncs of a
# sync at step 5 complete in step 6's forward pass, unit u's allreduce posted before unit u-1's
# forward began (prefetch 1) and waited for after it ended; without, at step 5 itself.
if python3 - "$tmp/h5-overlap.timeline" "$tmp/h5-no-overlap.timeline" <<'PY'; then
import json, sys
from collections import defaultdict
def load(path):
    ev = defaultdict(dict)
    for line in open(path):
        e = json.loads(line)
        ev[(e["rank"], e["step"], e["kind"])][e["unit"]] = e
    return ev
ov, no = load(sys.argv[1]), load(sys.argv[2])
units = 2 + 3  # tiny: 2 blocks
problems = []
for r in range(4):
    for s in range(1, 31):
        for kind in ("forward", "backward"):
            if sorted(ov[(r, s, kind)]) != list(range(units)):
                problems.append(f"rank {r} step {s} {kind}: units {sorted(ov[(r, s, kind)])}")
    for s in (5, 15, 25):  # syncs not followed by validation (10, 20, 30 flush at once)
        sync, fwd = ov[(r, s + 1, "sync")], ov[(r, s + 1, "forward")]
        if sorted(sync) != list(range(units)) or ov[(r, s, "sync")]:
            problems.append(f"rank {r}: sync of step {s} not in step {s + 1}'s forward"); continue
        for u in range(2, units):
            if not (sync[u]["begin"] <= fwd[u - 1]["begin"] and sync[u]["wait"] >= fwd[u - 1]["end"]
                    and sync[u]["end"] <= fwd[u]["begin"]):
                problems.append(f"rank {r} step {s + 1} unit {u}: {sync[u]} vs {fwd[u - 1]}")
        if sorted(no[(r, s, "sync")]) != list(range(units)) or no[(r, s + 1, "sync")]:
            problems.append(f"rank {r}: --no-overlap sync of step {s} not at step {s}")
print("ok   timeline: per-unit forward/backward on every rank; overlapped syncs posted one unit "
      "ahead inside the next forward pass" if not problems else "FAIL timeline: " +
      "; ".join(problems[:5]))
sys.exit(1 if problems else 0)
PY
  :
else
  failures=$((failures + 1))
fi

# 5. A worker whose pseudo-gradient is scaled 100x at step 30: edit drops it (armed after 5
# syncs) and ends within 2% of its clean run; diloco takes it in (reported, not asserted beyond
# the fault being recorded).
f=("${common[@]}" --steps 40 --sync-every 2 --eval-every 10 --warmup-steps 0 --ewma-warmup 5
  --ewma-alpha 0.3)
for run_name in "edit-clean:edit:" "edit-fault:edit:corrupt:2:30:100" \
  "diloco-fault:diloco:corrupt:2:30:100"; do
  IFS=: read -r name strategy fault <<<"$run_name"
  run 4 "$atoll" "${f[@]}" --strategy "$strategy" ${fault:+--inject-fault "$fault"} \
    --out "$tmp/$name" >"$tmp/$name.out" 2>&1 || fail "$name run"
done
if python3 - "$tmp" <<'PY'; then
import json, sys
d = sys.argv[1]
def lines(name): return [json.loads(l) for l in open(f"{d}/{name}/metrics.jsonl")]
def last_val(name): return [j["val_loss"] for j in lines(name) if "val_loss" in j][-1]
at30 = [j for j in lines("edit-fault") if j["step"] == 30][0]
clean_drops = [j["edit_dropped"] for j in lines("edit-clean") if j.get("edit_dropped")]
workers = sorted({w for _, w in at30.get("edit_dropped", [])})
ok = (at30.get("fault_injected") == "corrupt:2:30:100" and workers == [2] and not clean_drops)
clean, faulty, diloco = last_val("edit-clean"), last_val("edit-fault"), last_val("diloco-fault")
ok = ok and abs(faulty - clean) <= 0.02 * clean
print(f"ok   edit drops the corrupted worker {workers} at step 30 (clean run: no drops); validation "
      f"loss {faulty:.4f} vs clean {clean:.4f}; diloco with the same fault: {diloco:.4f}"
      if ok else f"FAIL fault: at 30 {at30}, clean drops {clean_drops[:3]}, "
      f"val {faulty} vs {clean}")
sys.exit(0 if ok else 1)
PY
  grep -q "EDiT dropped worker 2" "$tmp/edit-fault.out" || fail "fault: no log line"
else
  failures=$((failures + 1))
fi

# 6. aedit, simulated (SMPI: a clock that does not depend on this machine's load), 4 ranks,
# model compute fixed at 0.1 s per step. (a) All workers equally fast and T = (H - 1/2) step
# times: the same syncs at the same steps as edit with H, so the same losses step for step.
# (b) A straggler (3x), random stalls and step weighting: resumed from the middle checkpoint,
# the run continues exactly as without the interruption (each worker's step count, round clock
# and counters come back).
sim() { timeout 600 "$root/scripts/simulate" cluster-16x25g 4 -- "$@"; }
root=$(cd "$(dirname "$0")/../.." && pwd)
a=("${common[@]}" --steps 24 --eval-every 8 --sync-warmup-steps 2 --sim-compute-s 0.1)
sim "${a[@]}" --strategy edit --sync-every 5 --out "$tmp/sim-edit" >"$tmp/sim-edit.out" 2>&1 ||
  fail "simulated edit run"
sim "${a[@]}" --strategy aedit --sync-seconds 0.45 --out "$tmp/sim-aedit" >"$tmp/sim-aedit.out" 2>&1 ||
  fail "simulated aedit run"
syncs() { python3 -c '
import json, sys
print(" ".join(str(j["step"]) for j in map(json.loads, open(sys.argv[1])) if j.get("synced")))' "$1"; }
if msg=$(compare loss "$tmp/sim-edit/metrics.jsonl" "$tmp/sim-aedit/metrics.jsonl" 0) &&
  [ "$(syncs "$tmp/sim-edit/metrics.jsonl")" = "7 12 17 22" ] &&
  [ "$(syncs "$tmp/sim-aedit/metrics.jsonl")" = "7 12 17 22 27" ]; then
  echo "ok   aedit (equal speeds, T = 4.5 steps) == edit H = 5: syncs at 7 12 17 22; losses $msg"
else
  fail "aedit vs edit: ${msg:-} syncs $(syncs "$tmp/sim-edit/metrics.jsonl") / $(syncs "$tmp/sim-aedit/metrics.jsonl")"
fi
b=("${a[@]}" --strategy aedit --sync-seconds 0.45 --inject-fault straggler:1:3,stall:0.1:0.2
  --step-weight 0.5 --checkpoint-every 8)
sim "${b[@]}" --out "$tmp/sim-straggler" >"$tmp/sim-straggler.out" 2>&1 || fail "aedit straggler run"
cp -r "$tmp/sim-straggler" "$tmp/sim-resumed"
first=$(ls "$tmp/sim-resumed/checkpoints/" | grep -E '^step-[0-9]+\.ckpt$' | sed -n 1p)
for f in "$tmp/sim-resumed/checkpoints/"step-*.ckpt; do
  case $(basename "$f") in "${first%.ckpt}"*) ;; *) rm "$f" ;; esac
done
sim "${b[@]}" --out "$tmp/sim-resumed" --resume >"$tmp/sim-resumed.out" 2>&1 || fail "aedit resume"
lines() { python3 -c '
import json, sys
for j in map(json.loads, open(sys.argv[1])):
    print(j["step"], j.get("loss"), j.get("val_loss"), j.get("round_steps"), j.get("delay_s"))' "$1"; }
uneven=$(python3 -c '
import json, sys
print(sum(1 for j in map(json.loads, open(sys.argv[1])) if len(set(j.get("round_steps", [0]))) > 1))' \
  "$tmp/sim-straggler/metrics.jsonl")
if [ -n "$first" ] && [ "$uneven" -gt 0 ] &&
  diff <(lines "$tmp/sim-straggler/metrics.jsonl") <(lines "$tmp/sim-resumed/metrics.jsonl") >/dev/null; then
  echo "ok   aedit with a straggler and stalls resumed from $first: identical metrics ($uneven rounds with uneven step counts)"
else
  fail "aedit resume from ${first:-?}: metrics differ or steps even ($uneven)"
fi

# 7. Bad input: a clear error on every rank.
expect_error sync-every-0 "--sync-every 0 must be at least 1" "${common[@]}" --strategy diloco \
  --sync-every 0
expect_error unknown-strategy "--strategy: nope not in" "${common[@]}" --strategy nope
expect_error no-overlap-diloco "--no-overlap switches off EDiT's layer-wise overlap: it applies to --strategy edit or aedit only" \
  "${common[@]}" --strategy diloco --no-overlap
expect_error sync-prefetch-negative "--sync-prefetch -1 is negative" "${common[@]}" \
  --strategy edit --sync-prefetch -1
expect_error topk-diloco "--topk compresses data-parallel gradients" "${common[@]}" \
  --strategy diloco --topk 0.01
run 2 "$atoll" "${common[@]}" --steps 2 --out "$tmp/ddp2" >/dev/null 2>&1 || fail "ddp run"
expect_error fault-rank "--inject-fault corrupt:5:3:100: worker 5 does not exist" "${common[@]}" \
  --strategy edit --inject-fault corrupt:5:3:100
expect_error fault-form "--inject-fault 'corrupt:1:x:2': STEP 'x' is not a number" "${common[@]}" \
  --strategy edit --inject-fault corrupt:1:x:2
expect_error straggler-rank "--inject-fault straggler:7:3: rank 7 does not exist" "${common[@]}" \
  --inject-fault straggler:7:3
expect_error straggler-factor "straggler:0:0.5': FACTOR must be at least 1" "${common[@]}" \
  --inject-fault straggler:0:0.5
expect_error stall-prob "stall:1.5:2': PROB must be in \[0, 1\]" "${common[@]}" \
  --inject-fault stall:1.5:2
expect_error fault-twice "straggler given twice" "${common[@]}" \
  --inject-fault straggler:0:2,straggler:1:2
expect_error aedit-no-period "--sync-seconds 0 must be a positive number" "${common[@]}" \
  --strategy aedit
expect_error aedit-negative-period "--sync-seconds -1 must be a positive number" "${common[@]}" \
  --strategy aedit --sync-seconds -1
expect_error step-weight-range "--step-weight 1.5 is not in \[0, 1\]" "${common[@]}" \
  --strategy aedit --sync-seconds 1 --step-weight 1.5
expect_error sync-seconds-edit "--sync-seconds applies to --strategy aedit only" "${common[@]}" \
  --strategy edit --sync-seconds 1
expect_error sync-every-aedit "--sync-every applies to --strategy diloco or edit \(this run has --strategy aedit: its rounds are timed by --sync-seconds\)" \
  "${common[@]}" --strategy aedit --sync-seconds 1 --sync-every 5
expect_error sync-every-ddp "--sync-every applies to --strategy diloco or edit \(this run has --strategy ddp\)" \
  "${common[@]}" --sync-every 5
expect_error timeline-unwritable "--timeline|/proc/atoll-no-such-dir/t.jsonl" "${common[@]}" \
  --strategy edit --timeline /proc/atoll-no-such-dir/t.jsonl
expect_error ewma-alpha "--ewma-alpha" "${common[@]}" --strategy edit --ewma-alpha 1.5
expect_error resume-other-strategy "was written by --strategy ddp; this run uses --strategy diloco" \
  "${common[@]}" --steps 4 --strategy diloco --out "$tmp/ddp2" --resume
exit $((failures > 0))
