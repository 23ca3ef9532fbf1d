#!/usr/bin/env bash
# Training across sites (--topology) end to end: each rank one site of data/cities-9.csv (of its
# first 4 where nothing rotates); diloco
# on the all-to-all schedule equals plain diloco; on the planned schedule for 1 Gbit/s sites with
# small FPGA memory (rotating triads) every meeting follows the period's rounds, the model clock
# advances by the round model, and the sites' anchors differ between meetings (clique averaging,
# not global); ddp across the WAN costs more model time than co-located ddp; bad input errors on
# every rank; sparse pseudo-gradients (--pseudo-topk) sum exactly and send far fewer bytes; aedit
# takes as many steps per round as fit in the period of each site's model clock.
# usage: sites_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/lib.sh"
cities=$root/data/cities-9.csv
l=(--steps 12 --strategy diloco --sync-every 3 --eval-every 6)
site_np() {  # site_np NAME NP ARGS...: a run of NP ranks (one per site) into $tmp/NAME
  local name=$1 np=$2
  shift 2
  run "$np" "$atoll" "${common[@]}" "$@" --out "$tmp/$name" >"$tmp/$name.out" 2>&1 ||
    { fail "$name run"; cat "$tmp/$name.out"; }
}
site() { site_np "$1" 9 "${@:2}"; }  # site NAME ARGS...: a 9-site run
# The all-to-all checks need no rotation: 4 sites of the 9 (a 9-rank run costs 2x a 4-rank one).
four=$tmp/cities-4.csv
head -6 "$cities" >"$four"

# 1. The all-to-all schedule is diloco's global sync (parameters averaged instead of
# pseudo-gradients: equal within float rounding).
site_np diloco 4 "${l[@]}"
site_np a2a 4 "${l[@]}" --topology "$four" --schedule all-to-all --compute-s 0.1
check "all-to-all schedule == diloco (4 sites)" "$tmp/diloco" "$tmp/a2a"

# 2. The planned schedule at 1 Gbit/s with 256 KiB of FPGA memory: a period of two triad rounds.
site planned "${l[@]}" --topology "$cities" --egress-gbps 1 --ingress-gbps 1 \
  --fpga-memory 262144 --compute-s 0.1
python3 - "$tmp/planned/metrics.jsonl" "$tmp/a2a/metrics.jsonl" <<'PY' || fail "planned schedule"
import json, sys
planned = [json.loads(l) for l in open(sys.argv[1])]
a2a = [json.loads(l) for l in open(sys.argv[2])]
meets = [j for j in planned if "round" in j]
assert [j["step"] for j in meets] == [3, 6, 9, 12], meets
assert [j["round"] for j in meets] == [0, 1, 0, 1], "rounds follow the period of 2"
assert all(j["clique"] >= 0 and j["wan_s"] > 0 for j in meets), "site 0 meets in every round"
clock = [j["sim_time_s"] for j in planned if "sim_time_s" in j]
assert all(b > a for a, b in zip(clock, clock[1:])), "the model clock advances every step"
# 12 steps of 0.1 s plus four meetings' round times.
wan = sum(j["wan_s"] for j in meets)
assert abs(clock[-1] - (1.2 + wan)) < 1e-6, (clock[-1], wan)
spread = [j["site_spread"] for j in planned if "site_spread" in j and j["step"] > 0]
flat = [j["site_spread"] for j in a2a if "site_spread" in j and j["step"] > 0]
assert min(spread) > 1e-4 and max(flat) < 1e-5, (spread, flat)
print(f"ok   planned schedule: rounds 0 1 0 1, model clock {clock[-1]:.3f} s (WAN {wan:.3f} s), "
      f"anchors spread {min(spread):.2g}-{max(spread):.2g} (all-to-all {max(flat):.1g})")
PY

# 2b. --overlap-rounds 1: the same schedule with each exchange behind the next 3 local steps; its
# result lands one round stale, so the model clock pays only what the compute does not hide. (The
# run checkpoints at step 7 for 2c; checkpoints change no number.)
ck=("${l[@]}" --topology "$cities" --egress-gbps 1 --ingress-gbps 1 --fpga-memory 262144
  --compute-s 0.1 --overlap-rounds 1 --checkpoint-every 7 --keep-checkpoints 5)
site full "${ck[@]}"
python3 - "$tmp/full/metrics.jsonl" "$tmp/planned/metrics.jsonl" <<'PY' || fail "overlap"
import json, math, sys
over = [json.loads(l) for l in open(sys.argv[1])]
planned = [json.loads(l) for l in open(sys.argv[2])]
meets = [j for j in over if "round" in j]
assert [j["round"] for j in meets] == [0, 1, 0, 1], meets
end, waited = over[-1]["sim_time_s"], planned[-1]["sim_time_s"]
# The last exchange is waited for at the end; the others overlap the compute that follows them.
assert 1.2 + meets[-1]["wan_s"] <= end + 1e-6 and end < waited, (end, waited)
loss = [j["val_loss"] for j in over if "val_loss" in j]
ref = [j["val_loss"] for j in planned if "val_loss" in j]
assert all(math.isfinite(x) for x in loss) and loss[-1] != ref[-1], (loss, ref)
assert loss[-1] < loss[0], loss
print(f"ok   overlap-rounds 1: model clock {end:.3f} s (waiting: {waited:.3f} s), "
      f"val loss {loss[-1]:.4f} (waiting: {ref[-1]:.4f})")
PY

# 2c. Resume is exact: the overlapped planned run checkpointed at step 7 (after the step-6
# meeting, its exchange still in flight; the period at round 0) and resumed reproduces the
# uninterrupted run's losses, validation and model clock.
site resumed "${ck[@]}" --resume-from "$tmp/full/checkpoints/step-00000007.ckpt"
resumed_exactly "resume across sites at step 7" "$tmp/full" "$tmp/resumed" 8
# ... but not on another schedule: its meetings, clocks and exchange in flight are the planned one's.
EXPECT_NP=9 expect_error resume-other-schedule "trains across sites \(schedule all-to-all" \
  "${common[@]}" "${ck[@]}" --schedule all-to-all --out "$tmp/other" \
  --resume-from "$tmp/full/checkpoints/step-00000007.ckpt"

# 2e. --overlap-land arrival with Streaming DiLoCo's merge (--overlap-mix 0.5): each result lands
# after the first local step that ends past its exchange on the model clock (not one round
# later); the last is waited for at the end. Checkpointed at step 7 (the step-6 exchange, 0.18 s,
# lands after step 8) and resumed exactly.
ar=("${ck[@]}" --overlap-land arrival --overlap-mix 0.5)
site arrival "${ar[@]}"
python3 - "$tmp/arrival/metrics.jsonl" "$tmp/full/metrics.jsonl" <<'PY' || fail "overlap arrival"
import json, math, sys
arr = [json.loads(l) for l in open(sys.argv[1])]
meeting = [json.loads(l) for l in open(sys.argv[2])]
steps = [j for j in arr if "sim_time_s" in j]
meets = [j for j in steps if "round" in j]
landed = [j["step"] for j in steps if j.get("overlap_landed")]
expect = []
for m in meets[:-1]:  # the first step whose clock reaches the meeting's end
    end = m["sim_time_s"] + m["wan_s"]
    expect.append(next(j["step"] for j in steps if j["step"] > m["step"] and j["sim_time_s"] >= end - 1e-9))
assert landed == expect and all(s < m["step"] + 3 for s, m in zip(landed, meets)), (landed, expect)
assert not any(j.get("overlap_landed") for j in meeting), "landing at the meeting records none"
assert abs(steps[-1]["sim_time_s"] - meeting[-1]["sim_time_s"]) < 1e-9, "the same clock"
loss = [j["val_loss"] for j in arr if "val_loss" in j]
ref = [j["val_loss"] for j in meeting if "val_loss" in j]
assert all(math.isfinite(x) for x in loss) and loss[-1] < loss[0] and loss[-1] != ref[-1], (loss, ref)
print(f"ok   overlap-land arrival, mix 0.5: landed after steps {landed} (meetings at "
      f"{[m['step'] for m in meets]}), val loss {loss[-1]:.4f} (landing at the meeting: {ref[-1]:.4f})")
PY
site arrival-resumed "${ar[@]}" --resume-from "$tmp/arrival/checkpoints/step-00000007.ckpt"
resumed_exactly "resume with an exchange in flight (arrival, mix)" "$tmp/arrival" \
  "$tmp/arrival-resumed" 8

# 2d. Sparse pseudo-gradients (--pseudo-topk): with share 1 the sparse sum is the dense mean
# (all-to-all); with 0.01 each meeting sends >= 10x fewer bytes than the dense exchange (here the
# library allreduce, which sends each byte about twice; docs/results/wan-train.md has the target's
# comparison); resume
# restores the error-feedback residual exactly.
sp=("${l[@]}" --topology "$four" --schedule all-to-all --compute-s 0.1)
site_np sparse-all 4 "${sp[@]}" --pseudo-topk 1
check "--pseudo-topk 1 == the dense all-to-all exchange (4 sites)" "$tmp/a2a" "$tmp/sparse-all"
site_np sparse 4 "${sp[@]}" --pseudo-topk 0.01 --checkpoint-every 7 --keep-checkpoints 5
python3 - "$tmp/sparse/metrics.jsonl" "$tmp/a2a/metrics.jsonl" <<'PY' || fail "--pseudo-topk 0.01"
import json, math, sys
sparse = [json.loads(l) for l in open(sys.argv[1])]
dense = [json.loads(l) for l in open(sys.argv[2])]
sb = [j["exchange_bytes"] for j in sparse if "exchange_bytes" in j]
db = [j["exchange_bytes"] for j in dense if "exchange_bytes" in j]
assert len(sb) == len(db) == 4 and min(sb) > 0, (sb, db)
ratio = min(db) / max(sb)
val = [j["val_loss"] for j in sparse if "val_loss" in j]
assert ratio >= 10 and all(math.isfinite(v) for v in val) and val[-1] < val[0], (ratio, val)
print(f"ok   --pseudo-topk 0.01: {max(sb)} bytes per meeting against {min(db)} dense "
      f"({ratio:.0f}x fewer), validation {val[0]:.4f} -> {val[-1]:.4f}")
PY
site_np sparse-resumed 4 "${sp[@]}" --pseudo-topk 0.01 --checkpoint-every 7 --keep-checkpoints 5 \
  --resume-from "$tmp/sparse/checkpoints/step-00000007.ckpt"
if msg=$(compare loss "$tmp/sparse/metrics.jsonl" "$tmp/sparse-resumed/metrics.jsonl" 1e-6 8); then
  echo "ok   --pseudo-topk resume at step 7: losses $msg"
else
  fail "--pseudo-topk resume: ${msg:-?}"
fi
# The decayed residual (SparseLoCo's accumulator) reaches the run: same first meeting, later
# losses differ.
site_np sparse-decay 4 "${sp[@]}" --pseudo-topk 0.01 --pseudo-topk-decay 0.5
python3 - "$tmp/sparse/metrics.jsonl" "$tmp/sparse-decay/metrics.jsonl" <<'PY' ||
import json, math, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
la = {j["step"]: j["loss"] for j in a if "loss" in j}
lb = {j["step"]: j["loss"] for j in b if "loss" in j}
meets = sorted(j["step"] for j in a if "exchange_bytes" in j)
first, last = meets[0], max(la)
assert all(abs(la[s] - lb[s]) <= 1e-6 * abs(la[s]) for s in la if s <= first + 1), "before"
assert la[last] != lb[last] and all(math.isfinite(v) for v in lb.values()), (la[last], lb[last])
print(f"ok   --pseudo-topk-decay 0.5: same losses to step {first + 1}, "
      f"final {la[last]:.4f} (decay 1) vs {lb[last]:.4f}")
PY
  fail "--pseudo-topk-decay"

# 2e. edit across sites: EDiT's penalty over each clique's members, each site's detectors its own;
# on the all-to-all schedule it equals plain edit (blocking sync), also when the penalty drops site
# 2, whose pseudo-gradient is scaled 1000x at the meeting of step 9 (detection from the 3rd).
ed=("${l[@]/diloco/edit}" --ewma-warmup 2 --anomaly-threshold 50 --clip 5
  --inject-fault corrupt:2:9:1000)
site_np edit 4 "${ed[@]}" --no-overlap
site_np edit-a2a 4 "${ed[@]}" --topology "$four" --schedule all-to-all --compute-s 0.1
check "edit across sites, all-to-all == edit (4 sites, site 2 dropped at step 9)" "$tmp/edit" \
  "$tmp/edit-a2a"
python3 - "$tmp/edit/metrics.jsonl" "$tmp/edit-a2a/metrics.jsonl" <<'PY' || fail "edit drops"
import json, sys
plain = {j["step"]: sorted(map(tuple, j["edit_dropped"])) for j in map(json.loads, open(sys.argv[1]))
         if j.get("edit_dropped")}
sites = {j["step"]: sorted(map(tuple, j["edit_dropped"])) for j in map(json.loads, open(sys.argv[2]))
         if j.get("edit_dropped")}
assert plain == sites and list(sites) == [9] and {w for _, w in sites[9]} == {2}, (plain, sites)
print(f"ok   edit across sites drops what edit drops: site 2 in {len(sites[9])} layers at step 9")
PY

# On rotating triads, resumed at step 7, edit continues exactly (the detectors are in the
# checkpoint).
ep=("${l[@]/diloco/edit}" --ewma-warmup 2 --anomaly-threshold 50 --topology "$cities" --egress-gbps 1 --ingress-gbps 1
  --fpga-memory 262144 --compute-s 0.1 --checkpoint-every 7 --keep-checkpoints 5)
site edit-planned "${ep[@]}"
site edit-resumed "${ep[@]}" --resume-from "$tmp/edit-planned/checkpoints/step-00000007.ckpt"
if msg=$(compare loss "$tmp/edit-planned/metrics.jsonl" "$tmp/edit-resumed/metrics.jsonl" 1e-6 8) &&
  msg2=$(compare edit_weight_max "$tmp/edit-planned/metrics.jsonl" \
    "$tmp/edit-resumed/metrics.jsonl" 1e-9 8); then
  echo "ok   edit on rotating triads, resumed at step 7: losses $msg; weights $msg2"
else
  fail "edit resume across sites: ${msg:-?} ${msg2:-?}"
fi

# 2f. aedit across sites: a round when --sync-seconds of each site's model clock have passed. With
# every site at speed 1 and 0.3 s = 3 steps of 0.1 s it is edit (all-to-all, site 2 dropped at
# step 9). With Hong Kong at half speed on rotating triads it takes 2 steps per round, the others
# 3, so a round costs less model time than edit's (which waits for its 3 slow steps); resumed from
# the checkpoint named after site 0's step 9, it continues exactly.
ae=(--steps 12 --strategy aedit --sync-seconds 0.3 --eval-every 6 --ewma-warmup 2
  --anomaly-threshold 50 --compute-s 0.1)
site_np aedit-a2a 4 "${ae[@]}" --topology "$four" --clip 5 --inject-fault corrupt:2:9:1000 \
  --schedule all-to-all
check "aedit across sites at equal speeds == edit (all-to-all, site 2 dropped at step 9)" \
  "$tmp/edit-a2a" "$tmp/aedit-a2a"
tri=(--topology "$cities" --egress-gbps 1 --ingress-gbps 1 --fpga-memory 262144
  --site-speed HKG:0.5)
site aedit-slow "${ae[@]}" "${tri[@]}" --checkpoint-every 6 --keep-checkpoints 5
site aedit-resumed "${ae[@]}" "${tri[@]}" --checkpoint-every 6 --keep-checkpoints 5 \
  --resume-from "$tmp/aedit-slow/checkpoints/step-00000009.ckpt"
site edit-slow "${ep[@]}" --site-speed HKG:0.5
python3 - "$tmp/aedit-slow" "$tmp/edit-slow" "$tmp/aedit-resumed" <<'PY' || fail "aedit sites"
import json, sys
a, e, r = ([json.loads(x) for x in open(d + "/metrics.jsonl")] for d in sys.argv[1:])
meets = [j for j in a if "round" in j]
# 9 sites, Hong Kong 2 steps per round, 8 sites 3: 26 batches a round, until 12 x 9 = 108.
assert [j["batches"] for j in meets] == [26, 52, 78, 104, 130], meets
assert [j["step"] for j in meets] == [3, 6, 9, 12, 15], "site 0 takes 3 steps per round"
per_round = meets[-1]["sim_time_s"] / len(meets)
em = [j for j in e if "round" in j]
edit_round = em[-1]["sim_time_s"] / len(em)
assert per_round < edit_round - 0.1, (per_round, edit_round)
later = lambda m: {(j["step"], j.get("loss"), j.get("val_loss"), j["sim_time_s"]) for j in m
                   if j["step"] > 9}
assert later(a) == later(r) and len(later(r)) == 6, (later(a) ^ later(r))
print(f"ok   aedit with Hong Kong at half speed: 2 steps per round there, 3 elsewhere; "
      f"{per_round:.3f} s of model time per round (edit: {edit_round:.3f} s); resumed at step 9: "
      "the same losses and clock")
PY

# 3. ddp: every step pays its collectives on the model clock; across the WAN more than in one
# building.
site ddp-wan --steps 4 --eval-every 4 --topology "$cities" --egress-gbps 1 --ingress-gbps 1 \
  --compute-s 0.1
site ddp-colocated --steps 4 --eval-every 4 --topology "$root/data/colocated-9.csv" --compute-s 0.1
wan=$(field sim_time_s "$tmp/ddp-wan/metrics.jsonl" | tail -1 | cut -d' ' -f2)
local_=$(field sim_time_s "$tmp/ddp-colocated/metrics.jsonl" | tail -1 | cut -d' ' -f2)
if awk -v w="$wan" -v c="$local_" 'BEGIN { exit !(c > 0.4 && w > 2 * c) }'; then
  echo "ok   ddp model clock after 4 steps: across the WAN $wan s, co-located $local_ s"
else
  fail "ddp model clock: across the WAN '$wan' s, co-located '$local_' s"
fi

# 4. Bad input: a clear error on every rank.
printf '%s\n' "# code,name,continent,latitude_deg,longitude_deg" "A,Alpha,Europe,48.1,11.6" \
  "B,Beta,Europe,52.5,13.4" "C,Gamma,Asia,35.7,139.7" >"$tmp/three.csv"
schedule() {  # schedule FILE NAME SITES ROUND-LINES...
  local file=$1 name=$2 sites=$3
  shift 3
  printf '%s\n' "atoll-wan-schedule 1" "name $name" "sites $sites" "payload_bytes 1e6" "$@" >"$file"
}
schedule "$tmp/unknown.txt" s "A B X" round "clique unicast A X"
schedule "$tmp/apart.txt" s "A B C" round "clique unicast A B"
schedule "$tmp/hier.txt" hierarchical "A B C" round "clique unicast A B" round \
  "clique unicast A C"
t3=(--strategy diloco --topology "$tmp/three.csv")
expect_error world-size "has 9 sites but the job has 2 ranks" "${common[@]}" --strategy diloco \
  --topology "$cities"
EXPECT_NP=3 expect_error unknown-site "X" "${common[@]}" "${t3[@]}" --schedule "$tmp/unknown.txt"
EXPECT_NP=3 expect_error never-mixes "never averages every site with every other" "${common[@]}" \
  "${t3[@]}" --schedule "$tmp/apart.txt"
EXPECT_NP=3 expect_error hierarchical "a hierarchical schedule .* not clique averaging" \
  "${common[@]}" "${t3[@]}" --schedule "$tmp/hier.txt"
EXPECT_NP=3 expect_error fpga-too-small "infeasible|no clique fits" "${common[@]}" "${t3[@]}" \
  --schedule all-to-all --transport multicast_fpga --fpga-memory 64
EXPECT_NP=3 expect_error site-speed "--site-speed 'Q:2'|Q" "${common[@]}" "${t3[@]}" \
  --site-speed Q:2
expect_error schedule-alone "--schedule applies with --topology" "${common[@]}" \
  --schedule all-to-all
expect_error overlap-2 "--overlap-rounds 2 must be 0 or 1" "${common[@]}" --strategy diloco \
  --topology "$cities" --overlap-rounds 2
expect_error overlap-ddp "--overlap-rounds applies to --strategy diloco, edit and aedit" "${common[@]}" \
  --topology "$cities" --overlap-rounds 1
expect_error overlap-mix-range "--overlap-mix 1 must be in \\[0, 1\\)" "${common[@]}" \
  --strategy diloco --topology "$cities" --overlap-rounds 1 --overlap-mix 1
expect_error overlap-land-alone "--overlap-land applies with --overlap-rounds 1" "${common[@]}" \
  --strategy diloco --topology "$cities" --overlap-land arrival
expect_error overlap-land-name "--overlap-land soon must be meeting or arrival" "${common[@]}" \
  --strategy diloco --topology "$cities" --overlap-rounds 1 --overlap-land soon
schedule "$tmp/pairs.txt" pairs "A B C" round "clique unicast A B" round "clique unicast B C"
EXPECT_NP=3 expect_error pseudo-topk-cliques "--pseudo-topk needs a common anchor" \
  "${common[@]}" "${t3[@]}" --schedule "$tmp/pairs.txt" --pseudo-topk 0.01
expect_error pseudo-topk-range "--pseudo-topk 2 must be in" "${common[@]}" --strategy diloco \
  --topology "$cities" --pseudo-topk 2
expect_error pseudo-topk-decay-range "--pseudo-topk-decay 0 must be in" "${common[@]}" \
  --strategy diloco --topology "$cities" --pseudo-topk 0.01 --pseudo-topk-decay 0
expect_error pseudo-topk-decay-alone "--pseudo-topk-decay applies with --pseudo-topk" \
  "${common[@]}" --strategy diloco --topology "$cities" --pseudo-topk-decay 0.9
expect_error pseudo-topk-ddp "--pseudo-topk applies to --strategy diloco" "${common[@]}" \
  --topology "$cities" --pseudo-topk 0.01
expect_error pseudo-topk-fpga "--transport multicast_fpga does not apply" "${common[@]}" \
  --strategy diloco --topology "$cities" --pseudo-topk 0.01 --transport multicast_fpga
expect_error topk-sites "--topology with --topk is not built yet" "${common[@]}" \
  --topology "$cities" --topk 0.01
expect_error aedit-sites "--strategy aedit with --topology needs --compute-s" "${common[@]}" \
  --strategy aedit --sync-seconds 1 --topology "$cities"
expect_error aedit-step-weight "--step-weight with --topology weighs EDiT's penalty weights" \
  "${common[@]}" --strategy aedit --sync-seconds 1 --topology "$cities" --compute-s 0.1 \
  --step-weight 0.5 --no-penalty

[ "$failures" -eq 0 ] || exit 1
