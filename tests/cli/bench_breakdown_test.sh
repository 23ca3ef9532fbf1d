#!/usr/bin/env bash
# `atoll bench sync --breakdown` under SMPI (cluster-16x25g, 8 ranks, every scheme): each phase's
# network-only time is one latency plus its larger direction's bytes at the probed bandwidth; the
# probe finds the platform's 25 Gbit/s within 10%; the phases' network times add up to
# network_bound_s; no scheme beats its bound by more than 10% (the probe's error; a single phase
# can: Zen's pull completes its transfers in the decode's progress calls); allreduce's bound is
# that of 2(n-1)/n of the gradient's bytes, its input check a phase of its own; the text output
# prints the ratio; with --consume, every scheme's reads of its result are a phase.
# usage: bench_breakdown_test.sh SIMULATE_SCRIPT
set -uo pipefail
simulate=$1
args=(bench sync --schemes all --elements 1000000 --density 0.01 --repeat 1 --warmup 0
  --breakdown --verify)
json=$(timeout 600 "$simulate" cluster-16x25g 8 -- "${args[@]}" --json 2>&1) ||
  { echo "FAIL bench sync --breakdown --json"; echo "$json"; exit 1; }
python3 - <<PY || exit 1
import json
rows = [json.loads(l) for l in """$json""".splitlines() if l.startswith('{"')]
assert len(rows) == 9 and all(r["verified"] for r in rows), rows
for r in rows:
    a, b = r["network_latency_s"], r["network_bandwidth_bytes_per_s"]
    assert abs(b * 8 / 25e9 - 1) < 0.1, ("probed bandwidth", b * 8)
    total = 0
    for p in r["phases"]:
        most = max(p["bytes_sent_max"], p["bytes_received_max"])
        want = a + most / b if most else 0.0
        assert abs(p["network_s"] - want) <= 1e-12 + 1e-9 * want, (r["scheme"], p)
        total += p["network_s"]
    assert abs(total - r["network_bound_s"]) <= 1e-9 * total, r
    assert r["network_bound_s"] > 0 and r["network_bound_s"] <= 1.1 * r["time_min_s"], r
    assert sorted(p["phase"] for p in r["phases"]) == sorted(r["phase_time_s"]), r
allreduce = next(r for r in rows if r["scheme"] == "allreduce")
moved = sum(p["bytes_sent_max"] for p in allreduce["phases"] if p["phase"] != "check")
assert moved == int(2 * 7 / 8 * 4e6), moved
# The input check is a phase of its own: 7 words of 8 B (a problem, M, the block width and the
# index width, each width as a range) to each of the 7 peers at once.
check = [p for p in allreduce["phases"] if p["phase"] == "check"]
assert len(check) == 1 and check[0]["bytes_sent_max"] == 7 * 56, allreduce["phases"]
print("ok   --breakdown: " + ", ".join(f"{r['scheme']} {r['network_ratio']:.2f}x" for r in rows)
      + f" its network bound (probed {allreduce['network_bandwidth_bytes_per_s'] * 8 / 1e9:.1f}"
      " Gbit/s)")
PY
# --consume: every scheme's call timed until its result has been read (phase "consume"); Zen's
# element path reads its pull blocks in place (no "decode"); every row verified (a fold made in
# place against the fold of the same scheme's full result).
json=$(timeout 600 "$simulate" cluster-16x25g 8 -- "${args[@]}" --consume --json 2>&1) ||
  { echo "FAIL bench sync --consume --json"; echo "$json"; exit 1; }
python3 - <<PY || exit 1
import json
rows = [json.loads(l) for l in """$json""".splitlines() if l.startswith('{"')]
assert len(rows) == 9 and all(r["verified"] and r["consume"] for r in rows), rows
for r in rows:
    assert "consume" in r["phase_time_s"], r
    if r["scheme"] in ("zen", "zen_coo", "zen_ef"):
        assert "decode" not in r["phase_time_s"], r
print("ok   --consume: " + ", ".join(f"{r['scheme']} consume {r['phase_time_s']['consume'] * 1e3:.3f} ms"
                                      for r in rows))
PY
text=$(timeout 600 "$simulate" cluster-16x25g 8 -- "${args[@]}" 2>&1) ||
  { echo "FAIL bench sync --breakdown"; echo "$text"; exit 1; }
if grep -q "against a network bound of" <<<"$text"; then
  echo "ok   --breakdown text"
else
  echo "FAIL --breakdown text"; echo "$text"; exit 1
fi
