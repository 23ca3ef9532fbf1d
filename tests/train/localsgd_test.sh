#!/usr/bin/env bash
# Local SGD (--strategy diloco) end to end on 4 ranks: with H = 1, outer lr 1, no momentum and plain
# SGD inside it is synchronous SGD (validation losses equal ddp's); a run resumed from a checkpoint
# taken between two synchronizations continues exactly (per-rank replicas, θ̄, momentum); it
# learns; bad input errors on every rank. usage: localsgd_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
run() { timeout 600 mpirun --oversubscribe -np "$@"; }
common=(train --preset tiny --batch 8 --plot false --quiet --seed 7 --eval-windows 64)

# field NAME FILE: "step value" for every metrics line that has NAME.
field() { python3 -c '
import json, sys
for line in open(sys.argv[2]):
    j = json.loads(line)
    if sys.argv[1] in j: print(j["step"], j[sys.argv[1]])' "$1" "$2"; }
# compare NAME A B TOL [FROM]: steps >= FROM in both, same count, max relative difference <= TOL.
compare() {
  join <(field "$1" "$2" | sort -k1,1) <(field "$1" "$3" | sort -k1,1) |
    awk -v tol="$4" -v from="${5:-0}" '$1 >= from { n++; d = $2 - $3; if (d < 0) d = -d;
      r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
      END { printf "%d values, max relative difference %.3g\n", n, m; exit !(n > 0 && m <= tol) }'
}

# 1. Exactness: diloco with H = 1, outer lr 1, momentum 0, inner SGD == ddp with SGD.
sgd=("${common[@]}" --steps 20 --optimizer sgd --lr 0.05 --embed-lr 0.05 --warmup-steps 0
  --eval-every 2)
run 4 "$atoll" "${sgd[@]}" --out "$tmp/ddp" >/dev/null 2>&1 || fail "ddp sgd run"
if run 4 "$atoll" "${sgd[@]}" --strategy diloco --sync-every 1 --outer-lr 1 --outer-momentum 0 \
    --out "$tmp/diloco1" >/dev/null 2>&1 &&
  msg=$(compare val_loss "$tmp/ddp/metrics.jsonl" "$tmp/diloco1/metrics.jsonl" 1e-5); then
  echo "ok   diloco H=1 == ddp (sgd): validation losses, $msg"
else
  fail "diloco H=1 == ddp (sgd): ${msg:-run failed}"
fi

# 2. Resume between two synchronizations (step 10 of H = 4 after 2 warm-up steps) is exact.
dl=("${common[@]}" --steps 24 --strategy diloco --sync-every 4 --sync-warmup-steps 2
  --eval-every 4 --checkpoint-every 5 --keep-checkpoints 10)
run 4 "$atoll" "${dl[@]}" --out "$tmp/full" >/dev/null 2>&1 || fail "diloco run"
ls "$tmp/full/checkpoints/" | grep -q "step-00000010.rank-00003.ckpt" ||
  fail "no per-rank checkpoint files: $(ls "$tmp/full/checkpoints/")"
if run 4 "$atoll" "${dl[@]}" --out "$tmp/resumed" \
    --resume-from "$tmp/full/checkpoints/step-00000010.ckpt" >/dev/null 2>&1 &&
  msg=$(compare loss "$tmp/full/metrics.jsonl" "$tmp/resumed/metrics.jsonl" 1e-6 11) &&
  msg2=$(compare val_loss "$tmp/full/metrics.jsonl" "$tmp/resumed/metrics.jsonl" 1e-6 11); then
  echo "ok   diloco resume mid-interval: losses $msg; validation $msg2"
else
  fail "diloco resume mid-interval: ${msg:-resumed run failed} ${msg2:-}"
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

# 4. Bad input: a clear error on every rank.
expect_error() {
  local name=$1 pattern=$2 out rc
  shift 2
  out=$(timeout 120 mpirun --oversubscribe -np 2 "$atoll" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    fail "$name: exit status $rc"; echo "$out"; return
  fi
  for rank in 0 1; do
    if ! grep -E "rank $rank" <<<"$out" | grep -qE -e "$pattern"; then
      fail "$name: rank $rank did not report /$pattern/"; echo "$out"; return
    fi
  done
  echo "ok   $name"
}
expect_error sync-every-0 "--sync-every 0 must be at least 1" "${common[@]}" --strategy diloco \
  --sync-every 0
expect_error unknown-strategy "--strategy: nope not in" "${common[@]}" --strategy nope
expect_error topk-diloco "--topk compresses data-parallel gradients" "${common[@]}" \
  --strategy diloco --topk 0.01
run 2 "$atoll" "${common[@]}" --steps 2 --out "$tmp/ddp2" >/dev/null 2>&1 || fail "ddp run"
expect_error resume-other-strategy "was written by --strategy ddp; this run uses --strategy diloco" \
  "${common[@]}" --steps 4 --strategy diloco --out "$tmp/ddp2" --resume
exit $((failures > 0))
