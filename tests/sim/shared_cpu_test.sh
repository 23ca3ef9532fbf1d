#!/usr/bin/env bash
# The simulator's shared-CPU model: exact simulated times (shared_cpu_test.cpp, 4 ranks on 2
# shared cores), and its bad input refused by every rank with an error that names the problem.
# usage: shared_cpu_test.sh SHARED_CPU_TEST_SMPI ATOLL_SMPI
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
test_binary=$1 atoll_smpi=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$root/scripts/make-platform" --shared-cores 2 shared 4 1Gbps 1us 1Gf > "$tmp/shared.xml"
grep -q 'speed="1Gf,1Gf,0.666667Gf,0.5Gf"' "$tmp/shared.xml" || fail "make-platform --shared-cores 2: $(grep speed= "$tmp/shared.xml")"
ATOLL_SIM_SHARED_CORES=2 "$root/scripts/simulate" --binary "$test_binary" \
  --cfg smpi/simulate-computation:no "$tmp/shared.xml" 4 -- || fail "shared-CPU model times"
echo "ok: exact times with 4 ranks on 2 shared cores"

# Bad input: each case must fail on every rank (4 ranks), naming the problem.
expect_refused() {
  local name=$1 pattern=$2
  shift 2
  if "$@" > "$tmp/out" 2>&1; then fail "$name: accepted"; fi
  for r in 0 1 2 3; do
    grep -q "atoll: error: rank $r: .*$pattern" "$tmp/out" || { cat "$tmp/out" >&2; fail "$name: rank $r did not say '$pattern'"; }
  done
  echo "ok: $name refused on every rank"
}
"$root/scripts/make-platform" plain 4 1Gbps 1us 1Gf > "$tmp/plain.xml"
"$root/scripts/make-platform" --shared-cores 3 three 4 1Gbps 1us 1Gf > "$tmp/three.xml"
bench=(bench sync --elements 1000 --density 0.1 --repeat 1)
expect_refused "not a number" "ATOLL_SIM_SHARED_CORES must be a positive integer (got 'two')" \
  env ATOLL_SIM_SHARED_CORES=two "$root/scripts/simulate" --binary "$atoll_smpi" "$tmp/shared.xml" 4 -- "${bench[@]}"
expect_refused "zero cores" "must be a positive integer (got '0')" \
  env ATOLL_SIM_SHARED_CORES=0 "$root/scripts/simulate" --binary "$atoll_smpi" "$tmp/shared.xml" 4 -- "${bench[@]}"
expect_refused "platform without power states" "one speed per number of concurrent computations" \
  env ATOLL_SIM_SHARED_CORES=2 "$root/scripts/simulate" --binary "$atoll_smpi" "$tmp/plain.xml" 4 -- "${bench[@]}"
expect_refused "platform made for other cores" "make the platform with scripts/make-platform --shared-cores 2" \
  env ATOLL_SIM_SHARED_CORES=2 "$root/scripts/simulate" --binary "$atoll_smpi" "$tmp/three.xml" 4 -- "${bench[@]}"
if "$root/scripts/make-platform" --shared-cores x p 2 1Gbps > /dev/null 2> "$tmp/err"; then fail "--shared-cores x accepted"; fi
grep -q "needs a positive integer" "$tmp/err" || fail "make-platform --shared-cores x: $(cat "$tmp/err")"
echo "ok: make-platform refuses --shared-cores x"
echo "shared_cpu_test: all passed"
