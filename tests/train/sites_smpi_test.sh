#!/usr/bin/env bash
# The model clock of training across sites against SimGrid: 9 sites of data/cities-9.csv at
# 1 Gbit/s under scripts/simulate (`atoll wan-platform`, computation charged only as
# --sim-compute-s = --compute-s), diloco on the planned triads with unicast cliques: the simulated
# training time is within 10% of the model clock (docs/results/wan-train.md has the full table,
# scripts/results-wan-clock). usage: sites_smpi_test.sh BUILD_DIR
set -uo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$build/atoll" wan-platform --bandwidth 1Gbps --out "$tmp/cities.xml" >/dev/null || exit 1
timeout 900 "$root/scripts/simulate" --binary "$build/atoll-smpi" \
  --cfg smpi/simulate-computation:no "$tmp/cities.xml" 9 -- train --preset tiny --batch 8 \
  --steps 10 --strategy diloco --sync-every 5 --topology "$root/data/cities-9.csv" \
  --egress-gbps 1 --ingress-gbps 1 --transport unicast --schedule planned --fpga-memory 262144 \
  --compute-s 0.05 --sim-compute-s 0.05 --eval-every 10 --eval-windows 16 --plot false \
  --out "$tmp/run" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
python3 - "$tmp/log" <<'PY'
import re, sys
m = re.search(r"model clock at the end: ([0-9.]+) s .*MPI_Wtime of training ([0-9.]+) s, simulated",
              open(sys.argv[1]).read())
assert m, "no clock line"
model, simulated = float(m.group(1)), float(m.group(2))
# 10 steps of 0.05 s and two meetings: communication is a large share of the time.
assert model > 0.8, model
ratio = simulated / model
print(f"model clock {model:.4f} s, simulated {simulated:.4f} s, ratio {ratio:.3f}")
assert abs(ratio - 1) <= 0.10, ratio
PY
