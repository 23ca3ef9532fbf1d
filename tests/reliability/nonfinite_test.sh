#!/usr/bin/env bash
# Non-finite gradients (--nonfinite, --inject-fault nan:RANK:STEP), 3 ranks:
# - ddp, skip: step k is skipped on every rank (metrics name rank and tensor); the state after
#   step k is bit-identical to the state after step k−1 (checkpoint payloads); losses before k
#   equal a clean run's, and losses after k equal a run where step k's batch is skipped: the clean
#   run's checkpoint of step k−1 relabelled as step k and resumed.
# - ddp, fail: every rank exits (status 3) naming the rank and the tensor.
# - diloco: the NaN inner step is skipped on that worker alone, the run finishes finite; a NaN
#   pseudo-gradient (corrupt:RANK:STEP:nan) is dropped from the average; fail ends the job.
# - across sites: a site's NaN parameters at a meeting are dropped from its clique's mean.
# usage: nonfinite_test.sh ATOLL
set -uo pipefail
atoll=$1
source "$(dirname "$0")/../train/lib.sh"
args=("${common[@]}" --steps 8 --eval-every 4 --warmup-steps 2)
ckpt() { printf '%s/checkpoints/step-%08d.ckpt' "$1" "$2"; }

# 1. ddp, skip: nan on rank 1 at step 5, a checkpoint every step.
run 3 "$atoll" "${args[@]}" --inject-fault nan:1:5 --checkpoint-every 1 --keep-checkpoints 20 \
  --out "$tmp/nan" 2>"$tmp/nan.err" || fail "ddp nan run exited $?"
if python3 - "$tmp/nan/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
marked = [j["step"] for j in lines if "nonfinite" in j]
nf = next(j["nonfinite"] for j in lines if "nonfinite" in j)
ok = marked == [5] and nf["rank"] == 1 and nf["tensor"] != ""
print(f"steps marked non-finite: {marked}, {nf}")
sys.exit(0 if ok else 1)
PY
then echo "ok   ddp skip: step 5 recorded as skipped, rank and tensor named"; else fail "ddp skip: metrics"; fi
grep -q "step 5: rank 1's gradient of .* NaN or an infinity: the optimizer step is skipped" \
  "$tmp/nan.err" || fail "ddp skip: no message on stderr"
payload() { python3 -c 'import sys; b=open(sys.argv[1],"rb").read(); sys.stdout.buffer.write(b[24:-8])' "$1"; }
if cmp -s <(payload "$(ckpt "$tmp/nan" 4)") <(payload "$(ckpt "$tmp/nan" 5)"); then
  echo "ok   ddp skip: the state after step 5 is bit-identical to the state after step 4"
else
  fail "ddp skip: checkpoints of steps 4 and 5 differ"
fi
if cmp -s <(payload "$(ckpt "$tmp/nan" 5)") <(payload "$(ckpt "$tmp/nan" 6)"); then
  fail "ddp skip: step 6 did not train (checkpoints 5 and 6 equal)"
fi

# The clean run, and the reference: its step-4 checkpoint relabelled as step 5, resumed.
run 3 "$atoll" "${args[@]}" --checkpoint-every 4 --out "$tmp/clean" || fail "clean run exited $?"
mkdir -p "$tmp/skip/checkpoints"
python3 - "$(ckpt "$tmp/clean" 4)" "$(ckpt "$tmp/skip" 5)" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
b[8:16] = struct.pack("<Q", 5)  # the step; then the FNV-1a 64 of everything before the checksum
h = 0xcbf29ce484222325
for x in b[:-8]:
    h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
b[-8:] = struct.pack("<Q", h)
open(sys.argv[2], "wb").write(b)
PY
run 3 "$atoll" "${args[@]}" --resume-from "$(ckpt "$tmp/skip" 5)" --out "$tmp/skip" ||
  fail "reference (step 5 skipped) run exited $?"
before=$(join <(field loss "$tmp/nan/metrics.jsonl" | awk '$1 < 5') \
  <(field loss "$tmp/clean/metrics.jsonl" | awk '$1 < 5') | awk '$2 != $3' | wc -l)
if [ "$before" -eq 0 ] && [ "$(field loss "$tmp/nan/metrics.jsonl" | awk '$1 < 5' | wc -l)" -eq 4 ]; then
  echo "ok   ddp skip: losses of steps 1-4 equal the clean run's"
else
  fail "ddp skip: $before losses before step 5 differ from the clean run's"
fi
after=$(join <(field loss "$tmp/nan/metrics.jsonl" | awk '$1 > 5') \
  <(field loss "$tmp/skip/metrics.jsonl" | awk '$1 > 5') | awk '$2 == $3' | wc -l)
val=$(join <(field val_loss "$tmp/nan/metrics.jsonl" | awk '$1 == 8') \
  <(field val_loss "$tmp/skip/metrics.jsonl" | awk '$1 == 8') | awk '$2 == $3' | wc -l)
if [ "$after" -eq 3 ] && [ "$val" -eq 1 ]; then
  echo "ok   ddp skip: losses of steps 6-8 and validation at 8 equal the run that skipped step 5's batch"
else
  fail "ddp skip: $after of 3 losses after step 5 and $val of 1 validation equal the reference"
  field loss "$tmp/nan/metrics.jsonl"; field loss "$tmp/skip/metrics.jsonl"
fi

# 2. ddp, fail: every rank names rank 2 and the tensor, exit status 3.
out=$(timeout 300 mpirun --oversubscribe -np 3 "$atoll" "${args[@]}" --nonfinite fail \
  --inject-fault nan:2:3 2>&1)
rc=$?
named=$(grep -cE "rank [0-2]: step 3: rank 2's gradient of [a-z_.0-9]+ holds a NaN" <<<"$out")
if [ $rc -eq 3 ] && [ "$named" -eq 3 ]; then
  echo "ok   ddp fail: exit 3, all 3 ranks name rank 2 and the tensor"
else
  fail "ddp fail: exit $rc, $named of 3 ranks named the failure"; echo "$out" | tail -5
fi

# 3. diloco: the NaN inner step is skipped on worker 1 alone; the run ends finite.
local_args=("${args[@]}" --strategy diloco --sync-every 2 --sync-warmup-steps 2)
run 3 "$atoll" "${local_args[@]}" --inject-fault nan:1:5 --out "$tmp/local" 2>"$tmp/local.err" ||
  fail "diloco nan run exited $?"
if grep -q "step 5: rank 1's gradient of .*skipped" "$tmp/local.err" &&
  [ "$(grep -c "gradient of" "$tmp/local.err")" -eq 1 ] &&
  field val_loss "$tmp/local/metrics.jsonl" | awk '$1 == 8 && $2 + 0 == $2 && $2 < 20 { ok = 1 }
    END { exit !ok }'; then
  echo "ok   diloco: worker 1's inner step 5 skipped alone; validation at 8: $(field val_loss "$tmp/local/metrics.jsonl" | tail -1)"
else
  fail "diloco: skipped inner step"; cat "$tmp/local.err"; tail -2 "$tmp/local/metrics.jsonl"
fi
# A NaN pseudo-gradient (worker 2 at the sync of step 6) is dropped from the average.
run 3 "$atoll" "${local_args[@]}" --inject-fault corrupt:2:6:nan --out "$tmp/drop" \
  2>"$tmp/drop.err" || fail "diloco corrupt run exited $?"
if python3 - "$tmp/drop/metrics.jsonl" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
dropped = {j["step"]: sorted({w for _, w in j["dropped"]}) for j in lines if j.get("dropped")}
last = [j["val_loss"] for j in lines if "val_loss" in j][-1]
print(f"dropped: {dropped}, last validation {last}")
sys.exit(0 if dropped == {6: [2]} and last is not None and math.isfinite(last) else 1)
PY
then echo "ok   diloco: the NaN pseudo-gradient of worker 2 dropped at step 6, validation finite"
else fail "diloco: NaN pseudo-gradient not dropped"; fi
# fail: the worker alone knows; it ends the job (status 3) naming itself and the tensor.
out=$(timeout 300 mpirun --oversubscribe -np 3 "$atoll" "${local_args[@]}" --nonfinite fail \
  --inject-fault nan:1:5 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "rank 1: step 5: rank 1's gradient of [a-z_.0-9]+ holds" <<<"$out"; then
  echo "ok   diloco fail: exit $rc, rank 1 named with the tensor"
else
  fail "diloco fail: exit $rc"; echo "$out" | tail -5
fi

[ "$failures" -eq 0 ] && echo "nonfinite: all passed" || echo "nonfinite: $failures failed"

# 4. Across sites (3 sites, all-to-all): site 2's NaN parameters at its meeting of step 6 are
# dropped from the clique's mean; the run ends finite.
head -5 "$(dirname "$0")/../../data/cities-9.csv" >"$tmp/sites-3.csv"
run 3 "$atoll" "${local_args[@]}" --topology "$tmp/sites-3.csv" --schedule all-to-all \
  --compute-s 0.1 --inject-fault corrupt:2:6:nan --out "$tmp/sites" 2>"$tmp/sites.err" ||
  fail "sites corrupt run exited $?"
if python3 - "$tmp/sites/metrics.jsonl" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
dropped = {j["step"]: j["dropped"] for j in lines if j.get("dropped")}
val = [j["val_loss"] for j in lines if "val_loss" in j]
print(f"dropped: {dropped}, validation {val}")
sys.exit(0 if dropped == {6: [2]} and all(math.isfinite(v) for v in val) else 1)
PY
then
  grep -q "step 6: round 0: site(s) SIN of clique 0 had non-finite parameters: dropped" \
    "$tmp/sites.err" && echo "ok   sites: site 2's NaN parameters dropped at step 6, validation finite" ||
    { fail "sites: no message naming the site"; cat "$tmp/sites.err"; }
else
  fail "sites: NaN parameters not dropped"; cat "$tmp/sites.err"
fi
exit $((failures > 0))
