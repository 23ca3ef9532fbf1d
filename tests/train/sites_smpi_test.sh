#!/usr/bin/env bash
# The model clock of training across sites against SimGrid: 9 sites of data/cities-9.csv at
# 1 Gbit/s under scripts/simulate (`atoll wan-platform`, computation charged only as
# --sim-compute-s = --compute-s), diloco on the planned triads with unicast cliques: the simulated
# training time is within 10% of the model clock; on one all-site ring (whose members leave one by
# one: the model clock's entry-skew model, wan/ring_exits.h, with the sites starting together)
# within 1% (docs/results/wan-train.md has the full table, scripts/results-wan-clock).
# usage: sites_smpi_test.sh BUILD_DIR
set -uo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$build/atoll" wan-platform --bandwidth 1Gbps --out "$tmp/cities.xml" >/dev/null || exit 1
# run NAME ARGS...: one 10-step diloco run under SimGrid; prints its model clock and simulated time.
run() {
  local name=$1
  shift
  timeout 900 "$root/scripts/simulate" --binary "$build/atoll-smpi" \
    --cfg smpi/simulate-computation:no "$tmp/cities.xml" 9 -- train --preset tiny --batch 8 \
    --steps 10 --strategy diloco --sync-every 5 --topology "$root/data/cities-9.csv" \
    --egress-gbps 1 --ingress-gbps 1 --compute-s 0.05 --sim-compute-s 0.05 --eval-every 10 \
    --eval-windows 16 --plot false --out "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; exit 1; }
}
run triads --transport unicast --schedule planned --fpga-memory 262144
sites=$(grep -v '^#' "$root/data/cities-9.csv" | cut -d, -f1 | tr '\n' ' ')
printf '%s\n' "atoll-wan-schedule 1" "name ring-9" "sites $sites" "payload_bytes 8.9e6" "round" \
  "ring $sites" >"$tmp/ring.txt"
run ring --schedule "$tmp/ring.txt"
python3 - "$tmp/triads.log" "$tmp/ring.log" <<'PY'
import re, sys
def clocks(log):
    m = re.search(r"model clock at the end: ([0-9.]+) s .*MPI_Wtime of training ([0-9.]+) s, simulated",
                  open(log).read())
    assert m, f"no clock line in {log}"
    return float(m.group(1)), float(m.group(2))
# 10 steps of 0.05 s and two meetings: communication is a large share of the time.
for log, tolerance in ((sys.argv[1], 0.10), (sys.argv[2], 0.01)):
    model, simulated = clocks(log)
    assert model > 0.8, model
    ratio = simulated / model
    print(f"{log}: model clock {model:.4f} s, simulated {simulated:.4f} s, ratio {ratio:.3f}")
    assert abs(ratio - 1) <= tolerance, ratio
PY
