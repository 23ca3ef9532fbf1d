#!/usr/bin/env bash
# atoll train end to end on 4 ranks: every scheme gives the allreduce losses (exactness), a run
# killed with SIGKILL resumes exactly, corrupt/truncated checkpoints are refused, bad input errors
# on every rank. usage: train_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'pkill -9 -f "atoll train .*$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
source "$(dirname "$0")/../each_rank.sh"
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
run() { timeout 600 mpirun --oversubscribe -np "$@"; }
common=(train --preset tiny --batch 8 --eval-every 0 --plot false --quiet --seed 7)

# losses FILE: "step loss" per training step of a metrics file.
losses() { sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' "$1"; }
# compare A B TOL [FROM]: steps >= FROM present in both, same count, max relative difference <= TOL.
compare() {
  join <(losses "$1" | sort -k1,1) <(losses "$2" | sort -k1,1) |
    awk -v tol="$3" -v from="${4:-0}" '$1 >= from { n++; d = $2 - $3; if (d < 0) d = -d;
      r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
      END { printf "%d steps, max relative difference %.3g\n", n, m; exit !(n > 0 && m <= tol) }'
}

# 1. Exactness: 50 steps, every scheme against allreduce.
run 4 "$atoll" "${common[@]}" --steps 50 --sync allreduce --out "$tmp/allreduce" ||
  fail "allreduce run"
for s in agsparse sparcml omnireduce sparse_ps zen_coo zen auto; do
  if run 4 "$atoll" "${common[@]}" --steps 50 --sync "$s" --out "$tmp/$s" >/dev/null 2>&1 &&
    [ "$(losses "$tmp/$s/metrics.jsonl" | wc -l)" -eq 50 ] &&
    msg=$(compare "$tmp/allreduce/metrics.jsonl" "$tmp/$s/metrics.jsonl" 1e-5); then
    echo "ok   exact $s vs allreduce: $msg"
  else
    fail "exact $s vs allreduce: ${msg:-run failed}"
  fi
done

# The embedding's gradient as rows (the default; the optimizer reads Zen's summed rows in place)
# and as elements (copied into rows): the same sums in the same order, so the same bits.
if run 4 "$atoll" "${common[@]}" --steps 50 --sync zen --embedding-rows false \
  --out "$tmp/zen-elements" >/dev/null 2>&1 &&
  msg=$(compare "$tmp/zen/metrics.jsonl" "$tmp/zen-elements/metrics.jsonl" 0); then
  echo "ok   zen rows (read in place) == zen elements: $msg"
else
  fail "zen rows vs elements: ${msg:-run failed}"
fi

# auto's run records the scheme of every step: its trial steps first (at most 15, src/sync/
# auto_tuner.h), then one scheme.
if msg=$(python3 - "$tmp/auto/metrics.jsonl" <<'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r and r["step"] > 0]
trial = [bool(r.get("embedding_scheme_trial")) for r in steps]
n = trial.index(False) if False in trial else len(trial)
settled = {r.get("embedding_scheme") for r in steps[n:]}
ok = len(steps) == 50 and all("embedding_scheme" in r for r in steps) and not any(trial[n:]) \
    and n <= 15 and len(settled) == 1
print(f"{n} trial steps, then {settled}")
sys.exit(not ok)
PY
); then
  echo "ok   auto's scheme per step: $msg"
else
  fail "auto's scheme per step: $msg"
fi

# 2. Learning: the loss falls (first vs last step of the zen run).
first=$(losses "$tmp/zen/metrics.jsonl" | sed -n 1p | cut -d' ' -f2)
last=$(losses "$tmp/zen/metrics.jsonl" | tail -1 | cut -d' ' -f2)
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }'; then
  echo "ok   loss falls: $first -> $last"
else
  fail "loss did not fall: $first -> $last"
fi

# 2b. DDP's backward overlap (each unit's dense sum posted as its backward ends) sums what the
# bucketed allreduce after the backward pass sums: the same losses on 3 ranks. Simulated (SMPI,
# fixed compute per unit), every unit's sum but the last unit's is posted before the backward pass
# ends, and waited for only after it.
run 3 "$atoll" "${common[@]}" --steps 20 --sync zen --backward-overlap --out "$tmp/ov" \
  >/dev/null 2>&1 &&
  run 3 "$atoll" "${common[@]}" --steps 20 --sync zen --out "$tmp/no-ov" >/dev/null 2>&1 &&
  msg=$(compare "$tmp/ov/metrics.jsonl" "$tmp/no-ov/metrics.jsonl" 1e-5) &&
  echo "ok   backward overlap vs after the backward pass: $msg" ||
  fail "backward overlap vs after the backward pass: ${msg:-run failed}"
root=$(cd "$(dirname "$0")/../.." && pwd)
if timeout 600 "$root/scripts/simulate" cluster-16x25g 3 -- "${common[@]}" --steps 3 --sync zen \
  --sim-compute-s 0.05 --backward-overlap --timeline "$tmp/ov.timeline" --out "$tmp/ov-sim" \
  >/dev/null 2>&1 &&
  msg=$(python3 - "$tmp/ov.timeline" <<'PY'
import collections, json, sys
ev = collections.defaultdict(list)
for e in map(json.loads, open(sys.argv[1])):
    ev[(e["rank"], e["step"])].append(e)
problems, n = [], 0
for (rank, step), es in sorted(ev.items()):
    back = {e["unit"]: e for e in es if e["kind"] == "backward"}
    syncs = [e for e in es if e["kind"] == "sync"]
    if not syncs:
        problems.append(f"rank {rank} step {step}: no dense sums")
    end = max(e["end"] for e in back.values())
    for e in syncs:
        n += 1
        if e["unit"] >= 2 and not e["begin"] < back[e["unit"] - 1]["end"] <= end:
            problems.append(f"rank {rank} step {step}: unit {e['unit']} posted at {e['begin']}")
        if e["wait"] < end:
            problems.append(f"rank {rank} step {step}: unit {e['unit']} waited in the backward")
print(f"{n} dense sums, {len(ev)} rank-steps" + ("; " + "; ".join(problems[:3]) if problems else ""))
sys.exit(bool(problems) or n == 0)
PY
); then
  echo "ok   backward overlap, simulated: posted during the backward pass ($msg)"
else
  fail "backward overlap, simulated: ${msg:-run failed}"
fi

# 3. Resume: an uninterrupted run; a run killed with SIGKILL after its step-20 checkpoint, resumed.
resume_args=("${common[@]}" --steps 60 --checkpoint-every 10 --keep-checkpoints 3)
run 4 "$atoll" "${resume_args[@]}" --out "$tmp/full" >/dev/null 2>&1 || fail "uninterrupted run"
run 4 "$atoll" "${resume_args[@]}" --out "$tmp/killed" >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 1 1200); do
  [ -f "$tmp/killed/checkpoints/step-00000020.ckpt" ] && break
  sleep 0.1
done
pkill -9 -f "atoll train .*$tmp/killed" 2>/dev/null
kill -9 "$launcher" 2>/dev/null
wait "$launcher" 2>/dev/null
last_ckpt=$(ls "$tmp/killed/checkpoints" | tail -1)
if [ -f "$tmp/killed/checkpoints/step-00000060.ckpt" ]; then
  fail "resume: the run finished before it could be killed (machine too fast for the test)"
elif run 4 "$atoll" "${resume_args[@]}" --out "$tmp/killed" --resume >/dev/null 2>&1 &&
  msg=$(compare "$tmp/full/metrics.jsonl" "$tmp/killed/metrics.jsonl" 1e-6 21); then
  echo "ok   resume after SIGKILL (newest checkpoint $last_ckpt): $msg"
else
  fail "resume after SIGKILL: ${msg:-resumed run failed}"
fi

# expect_error NAME NP PATTERN ARGS...: every rank exits nonzero within 120 s (each to its own
# end: tests/each_rank_exit.sh) and reports PATTERN.
expect_error() {
  local name=$1 np=$2 pattern=$3
  shift 3
  local out rc failed
  out=$(mpirun_each 120 -np "$np" "$each_rank_exit" "$atoll" "$@")
  rc=$?
  if [ $rc -eq 124 ]; then fail "$name: hung (killed after 120 s)"; return; fi
  failed=$(ranks_exited "$out")
  if [ "$failed" -ne "$np" ]; then
    fail "$name: $failed of $np ranks exited nonzero"; echo "$out"; return
  fi
  for rank in $(seq 0 $((np - 1))); do
    if ! grep -E "rank $rank" <<<"$out" | grep -E -e "$pattern" >/dev/null; then
      fail "$name: rank $rank did not report /$pattern/"; echo "$out"; return
    fi
  done
  if grep -qiE "segmentation|core dumped|terminate called" <<<"$out"; then
    fail "$name: crashed"; echo "$out"; return
  fi
  echo "ok   $name"
}

# 4. Corrupt and truncated checkpoints are refused; the previous good one still works.
ckpts=("$tmp/full/checkpoints"/*.ckpt)
newest=${ckpts[-1]} previous=${ckpts[-2]}
cp "$newest" "$tmp/good.ckpt"
printf '\xff' | dd of="$newest" bs=1 seek=1000 conv=notrunc status=none
expect_error corrupt-checkpoint 2 "checksum mismatch.*previous one" "${resume_args[@]}" \
  --out "$tmp/full" --resume
head -c 5000 "$tmp/good.ckpt" >"$newest"
expect_error truncated-checkpoint 2 "truncated" "${resume_args[@]}" --out "$tmp/full" --resume
if run 4 "$atoll" "${resume_args[@]}" --out "$tmp/full" --resume-from "$previous" >/dev/null 2>&1; then
  echo "ok   previous checkpoint still usable"
else
  fail "previous checkpoint $previous not usable"
fi
expect_error checkpoint-shape 2 "holds a model of vocab 16384.*asks for vocab 8000" \
  "${resume_args[@]}" --vocab 8000 --out "$tmp/x" --resume-from "$previous"

# 5. Bad input.
expect_error missing-corpus 2 "corpus directory .* does not exist" "${common[@]}" --corpus "$tmp/none"
expect_error unreadable-config 2 "$tmp/none.json" "${common[@]}" --config "$tmp/none.json"
printf '{"steps": 5, "sync": ' >"$tmp/broken.json"
expect_error broken-config 2 "not valid JSON" train --config "$tmp/broken.json"
printf '{"sync": "nope"}\n' >"$tmp/bad-sync.json"
expect_error config-unknown-scheme 2 "nope" train --config "$tmp/bad-sync.json"
expect_error unknown-scheme 2 "sync: .*nope" "${common[@]}" --sync nope
expect_error unknown-preset 2 "preset: .*huge" "${common[@]}" --preset huge
expect_error vocab-too-large 2 "vocabulary of 60000 words requested" "${common[@]}" --vocab 60000
expect_error heads 2 "d-model 64 is not divisible by --heads 5" "${common[@]}" --heads 5
expect_error sim-compute-under-mpirun 2 "applies only under simulation" "${common[@]}" \
  --sim-compute-s 0.05
expect_error sim-compute-negative 2 "sim-compute-s -1 must be a finite number" "${common[@]}" --sim-compute-s -1
expect_error unwritable-out 2 "cannot create directory" "${common[@]}" --steps 2 --out /proc/atoll-no
mkdir -p "$tmp/two-docs"
printf 'The/at cat/nn sat/vbd ./.\n' | tee "$tmp/two-docs/ca01" >"$tmp/two-docs/ca02"
expect_error world-exceeds-documents 3 "world size 3 exceeds the 2 training documents" \
  "${common[@]}" --corpus "$tmp/two-docs" --vocab 4

# 6. A config file (JSON), overridden by a flag; top-k compressed dense gradients train.
printf '{"steps": 4, "sync": "zen_coo", "d_model": 32, "log_every": 1}\n' >"$tmp/cfg.json"
if out=$(run 2 "$atoll" train --config "$tmp/cfg.json" --steps 3 --eval-every 0 --plot false 2>&1) &&
  grep -q "sync zen_coo" <<<"$out" && grep -q "step 3/3" <<<"$out"; then
  echo "ok   JSON config + flag override"
else
  fail "JSON config + flag override"; echo "$out"
fi
if out=$(run 2 "$atoll" "${common[@]}" --steps 20 --topk 0.05 --out "$tmp/topk" 2>&1) &&
  a=$(losses "$tmp/topk/metrics.jsonl" | sed -n 1p | cut -d' ' -f2) &&
  b=$(losses "$tmp/topk/metrics.jsonl" | tail -1 | cut -d' ' -f2) &&
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a - 0.5) }'; then
  echo "ok   top-k 5% with error feedback trains: $a -> $b"
else
  fail "top-k run: ${a:-?} -> ${b:-?}"; echo "$out"
fi
# Top-k resume: every rank's error-feedback residual is in its own file (step-N.rank-R.ckpt) and
# comes back exactly.
if run 2 "$atoll" "${common[@]}" --steps 12 --topk 0.05 --checkpoint-every 6 --keep-checkpoints 5 \
    --out "$tmp/topk-full" >/dev/null 2>&1 &&
  [ -f "$tmp/topk-full/checkpoints/step-00000006.rank-00001.ckpt" ] &&
  run 2 "$atoll" "${common[@]}" --steps 12 --topk 0.05 --out "$tmp/topk-resumed" \
    --resume-from "$tmp/topk-full/checkpoints/step-00000006.ckpt" >/dev/null 2>&1 &&
  msg=$(compare "$tmp/topk-full/metrics.jsonl" "$tmp/topk-resumed/metrics.jsonl" 1e-6 7); then
  echo "ok   top-k resume from per-rank residual files: $msg"
else
  fail "top-k resume: ${msg:-run failed or no per-rank file}"
fi

# 7. Benchmark mode: every scheme on the same step's gradients, each checked against the training
#    scheme's rows.
if out=$(run 4 "$atoll" "${common[@]}" --steps 5 \
  --compare-schemes allreduce,agsparse,sparcml,omnireduce,sparse_ps,zen_coo,auto 2>&1) &&
  [ "$(grep -cE '^  [a-z_]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +yes$' <<<"$out")" -eq 7 ]; then
  echo "ok   --compare-schemes: 7 schemes verified against zen"
else
  fail "--compare-schemes"; echo "$out"
fi

# 8. Under simulation, --sim-compute-s charges the model work as a fixed time: every step's model_s
#    is that value and the step takes at least that long, and the loss is unchanged (the work
#    still runs). The simulator is the SMPI build next to the binary.
root=$(cd "$(dirname "$0")/../.." && pwd)
smpi_binary="$(dirname "$atoll")/atoll-smpi"
if out=$(timeout 600 "$root/scripts/simulate" --binary "$smpi_binary" cluster-16x25g 2 -- \
  "${common[@]}" --steps 3 --sim-compute-s 0.25 --out "$tmp/simc" 2>&1) &&
  run 2 "$atoll" "${common[@]}" --steps 3 --out "$tmp/realc" >/dev/null 2>&1 &&
  compare "$tmp/realc/metrics.jsonl" "$tmp/simc/metrics.jsonl" 1e-5 &&
  python3 - "$tmp/simc/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == 3, rows
for r in rows:
    assert r["model_s"] == 0.25, r
    assert 0.25 <= r["step_s"] < 0.25 + 0.5, r
PY
then
  echo "ok   --sim-compute-s under SMPI: model time fixed at 0.25 s, losses as under mpirun"
else
  fail "--sim-compute-s under SMPI"; echo "$out"
fi

[ $failures -eq 0 ] && echo "all train checks passed" || echo "$failures train check(s) failed"
exit $((failures > 0))
