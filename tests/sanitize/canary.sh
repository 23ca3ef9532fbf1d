#!/usr/bin/env bash
# The leak check is live (tests/sanitize/run.sh): the canary (leak_canary.cpp) loses one vector
# of 1000 ints on each of 2 ranks; LeakSanitizer must report that, and nothing of Open MPI's.
# usage: canary.sh LEAK_CANARY_BINARY
set -uo pipefail
out=$(timeout 120 mpirun --oversubscribe -np 2 "$1" 2>&1)
rc=$?
fail() { echo "FAIL canary: $1"; echo "$out"; exit 1; }
[ "$rc" -ne 0 ] || fail "exit status 0: the leak went unreported"
[ "$rc" -ne 124 ] || fail "hung"
# Per rank: the vector (24 bytes, direct) and its 4000-byte buffer (indirect), from main.
summaries=$(grep -c "SUMMARY: AddressSanitizer: 4024 byte(s) leaked in 2 allocation(s)" <<<"$out")
[ "$summaries" -eq 2 ] || fail "expected the canary's leak, alone, on both ranks"
grep -q "in main .*leak_canary.cpp" <<<"$out" || fail "the leak's stack does not name the canary"
echo "ok   canary: the canary's own leak reported on both ranks, nothing else"
