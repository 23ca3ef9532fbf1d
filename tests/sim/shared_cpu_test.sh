#!/usr/bin/env bash
# The simulator's shared-CPU model: exact simulated times (shared_cpu_test.cpp, 4 ranks on 2
# shared cores), and unfit platforms refused by every rank with an error that names the problem.
# usage: shared_cpu_test.sh SHARED_CPU_TEST_SMPI ATOLL_SMPI
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
test_binary=$1 atoll_smpi=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$root/scripts/make-platform" --shared-cores 2 shared 4 1Gbps 1us 1Gf > "$tmp/shared.xml"
grep -q 'speed="1Gf,1Gf,0.666667Gf,0.5Gf"' "$tmp/shared.xml" || fail "make-platform --shared-cores 2: $(grep speed= "$tmp/shared.xml")"
grep -q '<prop id="atoll_shared_cores" value="2"/>' "$tmp/shared.xml" || fail "make-platform --shared-cores 2 wrote no property"
"$root/scripts/simulate" --binary "$test_binary" --cfg smpi/simulate-computation:no \
  "$tmp/shared.xml" 4 -- || fail "shared-CPU model times"
echo "ok: exact times with 4 ranks on 2 shared cores"

# Unfit platforms: each must be refused on every rank (4 ranks), naming the problem.
expect_refused() {
  local name=$1 pattern=$2 xml=$3
  if "$root/scripts/simulate" --binary "$atoll_smpi" "$xml" 4 -- bench sync --elements 1000 \
      --density 0.1 --repeat 1 > "$tmp/out" 2>&1; then
    fail "$name: accepted"
  fi
  for r in 0 1 2 3; do
    grep -q "atoll: error: rank $r: .*$pattern" "$tmp/out" || { cat "$tmp/out" >&2; fail "$name: rank $r did not say '$pattern'"; }
  done
  echo "ok: $name refused on every rank"
}
sed 's/value="2"/value="two"/' "$tmp/shared.xml" > "$tmp/word.xml"
expect_refused "cores not a number" "atoll_shared_cores must be a positive integer (got 'two')" "$tmp/word.xml"
sed 's/value="2"/value="0"/' "$tmp/shared.xml" > "$tmp/zero.xml"
expect_refused "zero cores" "must be a positive integer (got '0')" "$tmp/zero.xml"
sed 's/speed="[^"]*"/speed="1Gf"/' "$tmp/shared.xml" > "$tmp/one-speed.xml"
expect_refused "hosts without power states" "one speed per number of concurrent computations" "$tmp/one-speed.xml"
sed 's/value="2"/value="3"/' "$tmp/shared.xml" > "$tmp/three.xml"
expect_refused "speeds made for other cores" "make the platform with scripts/make-platform --shared-cores 3" "$tmp/three.xml"
if "$root/scripts/make-platform" --shared-cores x p 2 1Gbps > /dev/null 2> "$tmp/err"; then fail "--shared-cores x accepted"; fi
grep -q "needs a positive integer" "$tmp/err" || fail "make-platform --shared-cores x: $(cat "$tmp/err")"
echo "ok: make-platform refuses --shared-cores x"
echo "shared_cpu_test: all passed"
