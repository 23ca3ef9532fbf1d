#!/usr/bin/env bash
# EDiT's 2-D mesh (--shard-group-size S) end to end: sharding the local-SGD state, the inner
# optimizer's state and the dense parameters over a worker's ranks changes no number that
# matters (sharded == --no-shard for ddp, diloco (also --embedding-mean touched), edit, aedit;
# ddp with S = 2 == S = 1), also with pieces of unequal size (6 ranks, S = 3); sharded runs
# resume exactly; the state per rank falls with S = 2; bad input errors on every rank.
# usage: mesh_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/lib.sh"
# mesh NAME NP ARGS...: one run into $tmp/NAME.
mesh() {
  local name=$1 np=$2
  shift 2
  run "$np" "$atoll" "${common[@]}" "$@" --out "$tmp/$name" >"$tmp/$name.out" 2>&1 ||
    { fail "$name run"; cat "$tmp/$name.out"; }
}

# 1. ddp: the mesh's groups are plain data-parallel; S = 2 (sharded or not) == S = 1.
d=(--steps 12 --eval-every 4)
mesh ddp-s1 4 "${d[@]}"
mesh ddp-s2 4 "${d[@]}" --shard-group-size 2
mesh ddp-s2-replicated 4 "${d[@]}" --shard-group-size 2 --no-shard
check "ddp S=2 == S=1" "$tmp/ddp-s1" "$tmp/ddp-s2"
check "ddp S=2 == S=2 --no-shard" "$tmp/ddp-s2-replicated" "$tmp/ddp-s2"
mesh ddp-sgd-s1 4 "${d[@]}" --optimizer sgd --lr 0.05 --embed-lr 0.05
mesh ddp-sgd-s2 4 "${d[@]}" --optimizer sgd --lr 0.05 --embed-lr 0.05 --shard-group-size 2
check "ddp --optimizer sgd S=2 == S=1" "$tmp/ddp-sgd-s1" "$tmp/ddp-sgd-s2"

# 2. diloco and edit (the penalty's weights and clipping, per-layer norms summed over the
# group), 4 ranks = 2 workers of 2: sharded == --no-shard.
l=(--steps 16 --sync-every 4 --sync-warmup-steps 2 --eval-every 4)
for strategy in diloco "edit --clip 0.5"; do
  name=${strategy%% *}
  mesh "$name-shard" 4 "${l[@]}" --strategy $strategy --shard-group-size 2
  mesh "$name-replicated" 4 "${l[@]}" --strategy $strategy --shard-group-size 2 --no-shard
  check "$name S=2 sharded == --no-shard" "$tmp/$name-replicated" "$tmp/$name-shard"
done
if [ "$(field loss "$tmp/diloco-shard/metrics.jsonl" | md5sum)" = \
  "$(field loss "$tmp/edit-shard/metrics.jsonl" | md5sum)" ]; then
  fail "edit and diloco gave the same losses: the penalty did nothing"
fi

# --embedding-mean touched (each row's Δ over the workers that touched it): the row weights of
# a worker's block summed over the workers, sharded == --no-shard; and it changes the losses.
mesh touched-shard 4 "${l[@]}" --strategy diloco --embedding-mean touched --shard-group-size 2
mesh touched-replicated 4 "${l[@]}" --strategy diloco --embedding-mean touched \
  --shard-group-size 2 --no-shard
check "diloco --embedding-mean touched sharded == --no-shard" "$tmp/touched-replicated" \
  "$tmp/touched-shard"
if [ "$(field loss "$tmp/diloco-shard/metrics.jsonl" | md5sum)" = \
  "$(field loss "$tmp/touched-shard/metrics.jsonl" | md5sum)" ]; then
  fail "--embedding-mean touched gave diloco's losses: the mean over touching workers did nothing"
fi

# 3. Pieces of unequal size: 6 ranks, S = 3 (2 workers), edit without overlap; and ddp on 6
# ranks with S = 2 (each group reduce-scatters, then 3 groups allreduce their pieces) == S = 1.
mesh ddp6-s1 6 "${d[@]}"
mesh ddp6-s2 6 "${d[@]}" --shard-group-size 2
check "ddp 6 ranks S=2 == S=1" "$tmp/ddp6-s1" "$tmp/ddp6-s2"
mesh edit6-shard 6 "${l[@]}" --strategy edit --no-overlap --shard-group-size 3
mesh edit6-replicated 6 "${l[@]}" --strategy edit --no-overlap --shard-group-size 3 --no-shard
check "edit 6 ranks S=3 sharded == --no-shard" "$tmp/edit6-replicated" "$tmp/edit6-shard"

# 4. Resume of sharded runs (each rank's share of the optimizer state, θ̄ and the outer momentum
# in its own file): edit between two synchronizations, and ddp.
resumed_same() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
at = int(sys.argv[3])
key = lambda j: (j["step"], j.get("loss"), j.get("val_loss"))
after = [key(j) for j in a if j["step"] > at]
sys.exit(0 if after and after == [key(j) for j in b if j["step"] > at] else 1)
PY
}
for strategy in "edit --sync-every 4 --sync-warmup-steps 2" ddp; do
  name=resume-${strategy%% *}
  r=(--steps 20 --strategy $strategy --eval-every 4 --checkpoint-every 5 --keep-checkpoints 10
    --shard-group-size 2)
  mesh "$name-full" 4 "${r[@]}"
  mesh "$name-part" 4 "${r[@]}" --resume-from "$tmp/$name-full/checkpoints/step-00000010.ckpt"
  if resumed_same "$tmp/$name-full/metrics.jsonl" "$tmp/$name-part/metrics.jsonl" 10; then
    echo "ok   ${strategy%% *} S=2 sharded resumed at step 10: identical losses after it"
  else
    fail "${strategy%% *} S=2 sharded resume differs"
  fi
done

# 5. aedit, simulated (the ranks of a worker agree on each round), with a straggler: sharded ==
# --no-shard. Only the fixed compute and the straggler's delay are charged (no measured
# computation: sharding changes the synchronization's CPU work, and with it, on a loaded machine,
# which step a round falls after).
sim() {
  timeout 600 "$root/scripts/simulate" --cfg smpi/simulate-computation:no cluster-16x25g 4 -- "$@"
}
a=("${common[@]}" --steps 20 --eval-every 8 --sync-warmup-steps 2 --sim-compute-s 0.1
  --strategy aedit --sync-seconds 0.45 --inject-fault straggler:1:3 --shard-group-size 2)
sim "${a[@]}" --out "$tmp/aedit-shard" >"$tmp/aedit-shard.out" 2>&1 || fail "simulated aedit S=2"
sim "${a[@]}" --no-shard --out "$tmp/aedit-replicated" >"$tmp/aedit-replicated.out" 2>&1 ||
  fail "simulated aedit S=2 --no-shard"
check "aedit S=2 (simulated, straggler) sharded == --no-shard" "$tmp/aedit-replicated" \
  "$tmp/aedit-shard"

# 6. Memory (the code's own accounting, printed at the end): with S = 2, local SGD's state, the
# inner optimizer's and the parameters held between steps (dense pieces and embedding block)
# halve.
state() {
  run 4 "$atoll" train --preset tiny --batch 8 --plot false --seed 7 --eval-windows 64 --steps 5 \
    --eval-every 5 --strategy diloco --sync-every 2 "$@" 2>/dev/null | grep "state per rank"
}
mb() { sed -n "s/.*$1 \([0-9.]*\) MB.*/\1/p"; }
m1=$(state) m2=$(state --shard-group-size 2)
s1=$(mb "local SGD (θ̄, outer momentum, Δ)" <<<"$m1") s2=$(mb "local SGD (θ̄, outer momentum, Δ)" <<<"$m2")
o1=$(mb "inner optimizer" <<<"$m1") o2=$(mb "inner optimizer" <<<"$m2")
p1=$(mb "parameters" <<<"$m1") p2=$(mb "parameters" <<<"$m2")
half() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && b / a > 0.49 && b / a < 0.51) }'; }
if [ -n "$s1$s2$o1$o2$p1$p2" ] && half "$s1" "$s2" && half "$o1" "$o2" && half "$p1" "$p2"; then
  echo "ok   per rank (S=1 -> S=2): local-SGD state $s1 -> $s2 MB, inner optimizer $o1 -> $o2 MB, parameters $p1 -> $p2 MB"
else
  fail "per rank (S=1 -> S=2): local-SGD state '$s1' -> '$s2', optimizer '$o1' -> '$o2', parameters '$p1' -> '$p2' MB"
fi

# 7. Bad input: a clear error on every rank.
expect_error not-dividing "--shard-group-size 3 does not divide the 2 ranks" "${common[@]}" \
  --strategy diloco --shard-group-size 3
expect_error zero "--shard-group-size 0 must be at least 1" "${common[@]}" --shard-group-size 0
expect_error no-shard-alone "--no-shard applies with --shard-group-size 2 or more" \
  "${common[@]}" --no-shard
expect_error topk-mesh "--topk is not supported with --shard-group-size > 1" "${common[@]}" \
  --shard-group-size 2 --topk 0.01
run 2 "$atoll" "${common[@]}" --steps 4 --strategy diloco --sync-every 2 --shard-group-size 2 \
  --out "$tmp/s2" >/dev/null 2>&1 || fail "S=2 run for the resume check"
expect_error resume-other-s \
  "was written with --shard-group-size 2; this run uses --shard-group-size 1" "${common[@]}" \
  --steps 6 --strategy diloco --sync-every 2 --out "$tmp/s2" --resume
expect_error resume-unsharded \
  "was written with --shard-group-size 2; this run uses --shard-group-size 2 --no-shard" \
  "${common[@]}" --steps 6 --strategy diloco --sync-every 2 --shard-group-size 2 --no-shard \
  --out "$tmp/s2" --resume
exit $((failures > 0))
