#!/usr/bin/env bash
# scripts/simulate reports failures: non-zero exit and a message naming the failure when the
# simulation deadlocks, a rank fails, throws or calls MPI_Abort, an MPI call errs (MPI_ERR_*), an
# SMPI collective algorithm refuses the number of ranks, or the program prints nothing; 0 for a
# good run.
# Platforms: hosts from <host id=...> elements too; scripts/make-platform validates its arguments.
# make-platform --crossbar (no backbone element) simulates the same times as the default backbone:
# every scheme of `bench sync` (ATOLL_SMPI), communication only, at 5 ranks.
# Nodes of several ranks (make-platform --node-cores, simulate --ranks-per-host): ranks that do not
# fit are refused; Zen in groups of a node's ranks (--zen-group) is exact and moves fewer bytes
# between nodes than flat Zen.
# usage: simulate_failures_test.sh SIMULATE_FAILURES_SMPI (tests/sim/simulate_failures.cpp) ATOLL_SMPI
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
program=$1
atoll_smpi=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $1"; [ -f "$tmp/out" ] && cat "$tmp/out"; failures=$((failures + 1)); }

# expect_simulate NAME WANT_STATUS(0|nonzero) PATTERN(or "") [SIMULATE_ARGS...] -- MODE
expect_simulate() {
  local name=$1 want=$2 pattern=$3 rc
  shift 3
  timeout 120 "$root/scripts/simulate" --binary "$program" "$@" > "$tmp/out" 2>&1
  rc=$?
  if [ $rc -eq 124 ]; then fail "$name: hung (killed after 120 s)"; return; fi
  if [ "$want" = 0 ] && [ $rc -ne 0 ]; then fail "$name: exit status $rc, want 0"; return; fi
  if [ "$want" != 0 ] && [ $rc -eq 0 ]; then fail "$name: exit status 0"; return; fi
  if [ -n "$pattern" ] && ! grep -qE "$pattern" "$tmp/out"; then fail "$name: no /$pattern/ in the output"; return; fi
  echo "ok   $name"
}

expect_simulate good 0 "rank 1: result 42" cluster-16x25g 2 -- ok
expect_simulate deadlock nonzero "simulate: FAILED: the simulation deadlocked" cluster-16x25g 2 -- deadlock
expect_simulate failing-rank nonzero "simulate: FAILED: rank\(s\) 1: the program failed \(smpirun exit status 3" \
  cluster-16x25g 2 -- fail
expect_simulate throwing-rank nonzero "simulate: FAILED: rank\(s\) 1: the program failed" cluster-16x25g 2 -- throw
expect_simulate mpi-error nonzero "simulate: FAILED: rank\(s\) 1: an MPI call failed: MPI_ERR_TRUNCATE" \
  cluster-16x25g 2 -- truncate
# Every rank prints its result, then calls MPI_Abort (as atoll does on a fatal error): SMPI kills the
# job and smpirun exits 0.
expect_simulate mpi-abort nonzero "simulate: FAILED: rank\(s\) [0-9,]+: the program aborted the job \(MPI_Abort" \
  cluster-16x25g 3 -- abort
# An SMPI collective algorithm refuses the number of ranks; the program catches that and exits 0.
expect_simulate refused-algorithm nonzero \
  "simulate: FAILED: SMPI refused a collective algorithm: alltoallv pair algorithm can't be used" \
  --cfg smpi/alltoallv:pair cluster-16x25g 3 -- refused
expect_simulate no-output nonzero "simulate: FAILED: the program printed nothing on stdout" cluster-16x25g 2 -- silent
expect_simulate no-output-allowed 0 "" --allow-no-output cluster-16x25g 2 -- silent

# A platform of explicit <host> elements (no cluster): its hosts are counted and named.
cat > "$tmp/hosts.xml" <<'XML'
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="world" routing="Full">
    <host id="alpha" speed="1Gf"/>
    <host id="beta" speed="1Gf"/>
    <host id="gamma" speed="1Gf"/>
    <link id="l" bandwidth="1Gbps" latency="10us"/>
    <route src="alpha" dst="beta"><link_ctn id="l"/></route>
    <route src="alpha" dst="gamma"><link_ctn id="l"/></route>
    <route src="beta" dst="gamma"><link_ctn id="l"/></route>
  </zone>
</platform>
XML
expect_simulate host-platform 0 "rank 2: result 42" "$tmp/hosts.xml" 3 -- ok
expect_simulate host-platform-too-many nonzero "4 ranks do not fit platform .* \(3 hosts" "$tmp/hosts.xml" 4 -- ok
printf '<?xml version="1.0"?>\n<platform version="4.1"><zone id="z" routing="Full"/></platform>\n' > "$tmp/empty.xml"
expect_simulate no-hosts nonzero "has no hosts" "$tmp/empty.xml" 1 -- ok

# make-platform: strict quantities, the unit kept on the backbone.
expect_platform_error() {
  local name=$1 pattern=$2
  shift 2
  if "$root/scripts/make-platform" "$@" > /dev/null 2> "$tmp/out"; then fail "make-platform $name: accepted"; return; fi
  if ! grep -qE "$pattern" "$tmp/out"; then fail "make-platform $name: no /$pattern/"; return; fi
  echo "ok   make-platform $name"
}
expect_platform_error latency-word "LATENCY must be a positive number with a unit.*got 'abc'" p 4 25Gbps abc
expect_platform_error latency-negative "LATENCY must be a positive number with a unit.*got '-5us'" p 4 25Gbps -5us
expect_platform_error latency-no-unit "LATENCY .*got '5'" p 4 25Gbps 5
expect_platform_error bandwidth-two-points "BANDWIDTH must be a positive number with a unit.*got '1.2.3Gbps'" p 4 1.2.3Gbps
expect_platform_error bandwidth-zero "BANDWIDTH must be positive \(got '0Gbps'\)" p 4 0Gbps
expect_platform_error bandwidth-no-unit "BANDWIDTH .*got '25'" p 4 25
expect_platform_error speed-zero "SPEED must be positive" p 4 25Gbps 2us 0Gf
if "$root/scripts/make-platform" p 4 10bps 1.5us > "$tmp/p.xml" && grep -q 'bw="10bps"' "$tmp/p.xml" \
  && grep -q 'bb_bw="40bps"' "$tmp/p.xml" && grep -q 'lat="1.5us"' "$tmp/p.xml"; then
  echo "ok   make-platform 10bps keeps its unit on the backbone"
else
  fail "make-platform 10bps: $(grep -o 'bb_bw="[^"]*"' "$tmp/p.xml")"
fi
expect_simulate made-platform 0 "rank 1: result 42" "$tmp/p.xml" 2 -- ok
"$root/scripts/make-platform" --shared-cores 2 p 4 1Gbps > "$tmp/shared.xml"  # "--" in a comment
expect_simulate shared-cores-platform 0 "rank 3: result 42" "$tmp/shared.xml" 4 -- ok
expect_platform_error unknown-option "unknown option '--fat'" --fat p 4 25Gbps

# The crossbar and the backbone give the same simulated time to every scheme (computation not
# charged, so the times are the network's alone and repeat exactly).
sync_times() {  # PLATFORM_XML: "scheme time_s verified" per line
  timeout 120 "$root/scripts/simulate" --binary "$atoll_smpi" \
    --cfg smpi/simulate-computation:no "$1" 5 -- bench sync --elements 100003 --density 0.02 \
    --zipf 1.1 --repeat 1 --verify --json 2> "$tmp/sync.err" |
    python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        row = json.loads(line)
        print(row["scheme"], repr(row["time_s"]), row.get("verified"))'
}
"$root/scripts/make-platform" p 5 10Gbps > "$tmp/backbone.xml"
"$root/scripts/make-platform" --crossbar p 5 10Gbps > "$tmp/crossbar.xml"
if grep -q bb_bw "$tmp/crossbar.xml"; then fail "make-platform --crossbar wrote a backbone"; fi
sync_times "$tmp/backbone.xml" > "$tmp/backbone.times"
sync_times "$tmp/crossbar.xml" > "$tmp/crossbar.times"
if [ "$(wc -l < "$tmp/backbone.times")" -lt 7 ]; then
  fail "crossbar check: bench sync gave $(wc -l < "$tmp/backbone.times") schemes' times"
  cat "$tmp/sync.err"
elif ! paste "$tmp/backbone.times" "$tmp/crossbar.times" | awk '
    $1 != $4 || $3 != "True" || $6 != "True" { exit 1 }
    { d = $2 - $5; if (d < 0) d = -d; if (d > 1e-9 * $2) exit 1 }'; then
  fail "crossbar check: the times differ (or a result was not verified)"
  paste "$tmp/backbone.times" "$tmp/crossbar.times"
else
  echo "ok   crossbar and backbone: the same simulated times ($(wc -l < "$tmp/crossbar.times") schemes)"
fi

"$root/scripts/make-platform" --crossbar --node-cores 2 nodes 3 10Gbps > "$tmp/nodes.xml"
grep -q 'core="2"' "$tmp/nodes.xml" || fail "make-platform --node-cores 2 wrote no core=\"2\""
expect_simulate nodes-fit 0 "rank 5: result 42" --ranks-per-host 2 "$tmp/nodes.xml" 6 -- ok
expect_simulate nodes-too-many nonzero "7 ranks do not fit.*2 rank\(s\) per host" \
  --ranks-per-host 2 "$tmp/nodes.xml" 7 -- ok
expect_platform_error node-cores-not-a-number "node-cores needs a positive integer" \
  --node-cores x p 4 25Gbps
zen_nodes() {  # ZEN_GROUP: "time_s bytes_sent_max verified"
  timeout 120 "$root/scripts/simulate" --binary "$atoll_smpi" --cfg smpi/simulate-computation:no \
    --ranks-per-host 2 "$tmp/nodes.xml" 6 -- bench sync --schemes zen --elements 1000003 \
    --density 0.02 --zipf 1.1 --repeat 1 --verify --json --zen-group "$1" 2> "$tmp/sync.err" |
    python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        row = json.loads(line)
        print(repr(row["time_s"]), row["bytes_sent_max"], row.get("verified"))'
}
read -r flat_t flat_b flat_ok < <(zen_nodes 1)
read -r grouped_t grouped_b grouped_ok < <(zen_nodes 2)
if [ "${flat_ok:-}" != True ] || [ "${grouped_ok:-}" != True ]; then
  fail "zen on nodes: not verified (flat '${flat_ok:-}', grouped '${grouped_ok:-}')"
  cat "$tmp/sync.err"
elif ! [ "$grouped_b" -lt "$flat_b" ]; then
  fail "zen on nodes: grouped sent $grouped_b bytes between nodes, flat $flat_b"
else
  echo "ok   zen on 3 nodes of 2 ranks: exact flat and grouped; bytes sent $flat_b -> $grouped_b, time $flat_t -> $grouped_t s"
fi
exit $((failures > 0))
