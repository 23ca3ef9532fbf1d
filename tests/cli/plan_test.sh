#!/usr/bin/env bash
# `atoll plan`: the aggregation unit is chosen per clique (issue 16, item 6) and a schedule that
# cannot run at the given FPGA memory is printed as infeasible, never as a number.
# usage: plan_test.sh ATOLL_BINARY
set -uo pipefail
atoll=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; printf '%s\n' "$@"; failures=$((failures + 1)); }

# 100 MB, 8 MiB FPGAs: all-to-all multicast + FPGA used to print 1.06e16 s (1 MiB units filled
# the memory); chosen per clique it is a finite time no later than the 64 KiB figure (2.83 s).
out=$(timeout 120 "$atoll" plan --payload 100000000 --fpga-memory 8388608 2>&1)
line=$(grep -E '^all_to_all_multicast_fpga ' <<<"$out")
time_s=$(awk '{print $NF}' <<<"$line")
if [[ $time_s =~ ^[0-9]+\.[0-9]+$ ]] && awk -v t="$time_s" 'BEGIN { exit !(t > 0 && t <= 2.8282) }'; then
  pass "plan-unit-per-clique ($time_s s)"
else
  fail "plan-unit-per-clique" "$out"
fi
grep -q "aggregation unit per clique" <<<"$out" && pass "plan-unit-header" || fail "plan-unit-header" "$out"

# Pinned to 1 MiB the same clique holds only its chunk slots: infeasible, in text and JSON.
out=$(timeout 120 "$atoll" plan --payload 100000000 --fpga-memory 8388608 --chunk-bytes 1048576 2>&1)
if grep -qE '^all_to_all_multicast_fpga +9 +1 +0 +infeasible$' <<<"$out" \
  && ! grep -qE 'e\+1[0-9]' <<<"$out"; then
  pass "plan-infeasible-text"
else
  fail "plan-infeasible-text" "$out"
fi
out=$(timeout 120 "$atoll" plan --json --payload 100000000 --fpga-memory 8388608 \
  --chunk-bytes 1048576 2>&1)
if python3 - "$out" <<'PY'
import json, sys
rows = {r["name"]: r for r in map(json.loads, sys.argv[1].splitlines()) if "name" in r}
m = rows["all_to_all_multicast_fpga"]
assert m["feasible"] is False and m["time_to_consensus_s"] is None and m["round_times_s"] == [None], m
p = rows["planned"]
assert p["feasible"] is True and p["time_to_consensus_s"] > 0, p
PY
then
  pass "plan-infeasible-json"
else
  fail "plan-infeasible-json" "$out"
fi

# The per-clique units in JSON: the throttled 9-site clique takes the smallest (32 KiB for 1e8).
out=$(timeout 120 "$atoll" plan --json --payload 100000000 --fpga-memory 8388608 2>&1)
if python3 - "$out" <<'PY'
import json, sys
rows = {r["name"]: r for r in map(json.loads, sys.argv[1].splitlines()) if "name" in r}
assert rows["all_to_all_multicast_fpga"]["chunk_bytes"] == [[32768]], rows["all_to_all_multicast_fpga"]
assert rows["all_to_all_unicast"]["chunk_bytes"] == [[None]]
PY
then
  pass "plan-json-chunk-bytes"
else
  fail "plan-json-chunk-bytes" "$out"
fi

# Latency models (issue 16, item 7): affine is fitted to the shipped pings and says so; an
# unknown model is an error naming the flag; JSON rows carry the model.
out=$(timeout 120 "$atoll" plan --latency-model affine --fpga-memory 1e9 2>&1)
grep -qE "latencies: affine fit, one way: same continent [0-9.]+ ms \+" <<<"$out" \
  && pass "plan-latency-affine" || fail "plan-latency-affine" "$out"
out=$(timeout 120 "$atoll" plan --fpga-memory 1e9 2>&1)
grep -q "latencies: fiber model" <<<"$out" && pass "plan-latency-fiber" || fail "plan-latency-fiber" "$out"
out=$(timeout 60 "$atoll" plan --latency-model cable 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "\-\-latency-model: latency model must be 'fiber' or 'affine' (got 'cable')" <<<"$out" \
  && pass "plan-latency-unknown" || fail "plan-latency-unknown" "$out"
out=$(timeout 120 "$atoll" plan --json --latency-model affine --fpga-memory 1e9 2>&1)
grep -q '"latency_model":"affine"' <<<"$out" && pass "plan-latency-json" || fail "plan-latency-json" "$out"

if [ "$failures" -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all plan checks passed"
