#!/usr/bin/env bash
# Training across sites on the 2-D mesh (--topology with --shard-group-size 2): each site is a
# shard group of 2 ranks that splits the site's exchange and outer state. With the all-to-all
# schedule it equals plain diloco on the same mesh (each rank the whole state); on a rotating
# pairs schedule the meetings follow the rounds, the sites' anchors differ, a checkpoint taken with
# an exchange in flight resumes exactly; --pseudo-topk runs; a NaN site is dropped whole; bad input
# errors on every rank.
# usage: sites_mesh_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
source "$(dirname "$0")/lib.sh"
l=(--steps 12 --strategy diloco --sync-every 3 --eval-every 6 --no-shard)
mesh_site() {  # mesh_site NAME NP ARGS...: one run into $tmp/NAME
  local name=$1 np=$2
  shift 2
  run "$np" "$atoll" "${common[@]}" "$@" --out "$tmp/$name" >"$tmp/$name.out" 2>&1 ||
    { fail "$name run"; cat "$tmp/$name.out"; }
}
printf '%s\n' "# code,name,continent,latitude_deg,longitude_deg" "A,Alpha,Europe,48.1,11.6" \
  "B,Beta,Europe,52.5,13.4" "C,Gamma,Asia,35.7,139.7" "D,Delta,Asia,22.3,114.2" >"$tmp/four.csv"
printf '%s\n' "# code,name,continent,latitude_deg,longitude_deg" "A,Alpha,Europe,48.1,11.6" \
  "B,Beta,Europe,52.5,13.4" "C,Gamma,Asia,35.7,139.7" >"$tmp/three.csv"

# 1. All-to-all across 3 sites x 2 ranks == diloco on the 2-D mesh of 6 ranks (S = 2).
mesh_site mesh-diloco 6 "${l[@]}" --shard-group-size 2
mesh_site mesh-a2a 6 "${l[@]}" --shard-group-size 2 --topology "$tmp/three.csv" \
  --schedule all-to-all --compute-s 0.1
check "all-to-all across 3 sites x 2 ranks == diloco on the mesh" "$tmp/mesh-diloco" \
  "$tmp/mesh-a2a"

# 2. Rotating pairs over 4 sites x 2 ranks, each exchange behind the next local steps
# (--overlap-rounds 1), checkpointed at step 7 with an exchange in flight and resumed.
printf '%s\n' "atoll-wan-schedule 1" "name pairs" "sites A B C D" "payload_bytes 1e6" round \
  "clique unicast A B" "clique unicast C D" round "clique unicast A C" "clique unicast B D" \
  >"$tmp/pairs.txt"
p=("${l[@]}" --shard-group-size 2 --topology "$tmp/four.csv" --schedule "$tmp/pairs.txt"
  --compute-s 0.1 --overlap-rounds 1 --checkpoint-every 7 --keep-checkpoints 5)
mesh_site pairs 8 "${p[@]}"
mesh_site pairs-resumed 8 "${p[@]}" --resume-from "$tmp/pairs/checkpoints/step-00000007.ckpt"
python3 - "$tmp/pairs/metrics.jsonl" <<'PY' || fail "pairs schedule"
import json, math, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
meets = [j for j in runs if "round" in j]
assert [j["round"] for j in meets] == [0, 1, 0, 1], meets
assert all(j["clique"] >= 0 and j["wan_s"] > 0 for j in meets), meets
spread = [j["site_spread"] for j in runs if "site_spread" in j and j["step"] > 0]
assert min(spread) > 1e-4, spread
loss = [j["val_loss"] for j in runs if "val_loss" in j]
assert all(math.isfinite(x) for x in loss) and loss[-1] < loss[0], loss
print(f"ok   rotating pairs on 4 sites x 2 ranks: rounds 0 1 0 1, anchors spread "
      f"{min(spread):.2g}-{max(spread):.2g}, val loss {loss[0]:.3f} -> {loss[-1]:.3f}")
PY
resumed_exactly "resume on the mesh across sites at step 7" "$tmp/pairs" "$tmp/pairs-resumed" 8
# The checkpoint's slices belong to S = 2: one rank per site is refused.
EXPECT_NP=4 expect_error resume-other-mesh \
  "written with --shard-group-size 2 --no-shard; this run uses --shard-group-size 1" "${common[@]}" \
  --steps 12 --strategy diloco --sync-every 3 --eval-every 6 --topology "$tmp/four.csv" \
  --schedule "$tmp/pairs.txt" --compute-s 0.1 --overlap-rounds 1 --out "$tmp/other" \
  --resume-from "$tmp/pairs/checkpoints/step-00000007.ckpt"

# 3. Sparse pseudo-gradients on the mesh: each rank sends the top 1% of its slice; the site's
# bytes are its ranks' together.
mesh_site topk 6 "${l[@]}" --shard-group-size 2 --topology "$tmp/three.csv" \
  --schedule all-to-all --compute-s 0.1 --pseudo-topk 0.01 --outer-momentum 0 --outer-lr 1
python3 - "$tmp/topk/metrics.jsonl" "$tmp/mesh-a2a/metrics.jsonl" <<'PY' || fail "pseudo-topk"
import json, math, sys
topk = [json.loads(l) for l in open(sys.argv[1])]
dense = [json.loads(l) for l in open(sys.argv[2])]
sent = [j["exchange_bytes"] for j in topk if "exchange_bytes" in j]
full = [j["exchange_bytes"] for j in dense if "exchange_bytes" in j]
assert len(sent) == 4 and min(full) > 10 * max(sent), (sent, full)
loss = [j["val_loss"] for j in topk if "val_loss" in j]
assert all(math.isfinite(x) for x in loss) and loss[-1] < loss[0], loss
print(f"ok   --pseudo-topk 0.01 on 3 sites x 2 ranks: {max(sent)} bytes per meeting per rank "
      f"(dense {min(full)}), val loss {loss[-1]:.3f}")
PY

# 4. A site whose parameters turn NaN (site 2 at its step-6 meeting) is dropped from the mean on
# both its ranks' slices, named once; the run ends finite.
run 6 "$atoll" "${common[@]}" "${l[@]}" --shard-group-size 2 --topology "$tmp/three.csv" \
  --schedule all-to-all --compute-s 0.1 --inject-fault corrupt:2:6:nan --out "$tmp/nan" \
  >"$tmp/nan.out" 2>&1 || fail "nan run"
python3 - "$tmp/nan/metrics.jsonl" "$tmp/nan.out" <<'PY' || fail "nan dropped"
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
dropped = {j["step"]: j["dropped"] for j in lines if j.get("dropped")}
val = [j["val_loss"] for j in lines if "val_loss" in j]
said = open(sys.argv[2]).read().count("had non-finite parameters")
assert dropped == {6: [2]} and all(math.isfinite(v) for v in val) and said == 1, (dropped, val, said)
print(f"ok   NaN site dropped on the mesh: {dropped}, named {said} time, validation {val[-1]:.3f}")
PY

# 5. Bad input.
t=(--strategy diloco --topology "$tmp/three.csv" --shard-group-size 2 --compute-s 0.1)
EXPECT_NP=4 expect_error mesh-world \
  "has 3 sites but the job has 2 workers of --shard-group-size 2 .*-np 6" "${common[@]}" "${t[@]}" --no-shard
EXPECT_NP=6 expect_error mesh-shard "needs --no-shard" "${common[@]}" "${t[@]}"
EXPECT_NP=6 expect_error mesh-ddp "--strategy ddp with --topology runs one rank per site" \
  "${common[@]}" --topology "$tmp/three.csv" --shard-group-size 2 --no-shard
EXPECT_NP=6 expect_error mesh-edit "needs --no-penalty" "${common[@]}" --strategy edit \
  --topology "$tmp/three.csv" --shard-group-size 2 --no-shard

[ "$failures" -eq 0 ] || exit 1
