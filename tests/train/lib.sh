# Shared by the end-to-end training tests (tests/train/*_test.sh): source it after setting
# `atoll` (the binary). Sets tmp (removed at exit), failures and common; defines fail, run,
# field, compare, same, check, resumed_exactly, expect_error.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
source "$(dirname "${BASH_SOURCE[0]}")/../each_rank.sh"
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
run() { timeout 600 mpirun --oversubscribe -np "$@"; }
common=(train --preset tiny --batch 8 --plot false --quiet --seed 7 --eval-windows 64)

# field NAME FILE: "step value" for every metrics line that has NAME.
field() { python3 -c '
import json, sys
for line in open(sys.argv[2]):
    j = json.loads(line)
    if sys.argv[1] in j: print(j["step"], j[sys.argv[1]])' "$1" "$2"; }
# compare NAME A B TOL [FROM]: steps >= FROM in both, same count, max relative difference <= TOL.
compare() {
  join <(field "$1" "$2" | sort -k1,1) <(field "$1" "$3" | sort -k1,1) |
    awk -v tol="$4" -v from="${5:-0}" '$1 >= from { n++; d = $2 - $3; if (d < 0) d = -d;
      r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
      END { printf "%d values, max relative difference %.3g\n", n, m; exit !(n > 0 && m <= tol) }'
}
# same NAME A B: the same steps in both, max relative difference <= 1e-5.
same() {
  join <(field "$1" "$2" | sort -k1,1) <(field "$1" "$3" | sort -k1,1) |
    awk -v na="$(field "$1" "$2" | wc -l)" -v nb="$(field "$1" "$3" | wc -l)" '
      { n++; d = $2 - $3; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
      END { printf "%d values, max relative difference %.3g", n, m; exit !(n > 0 && n == na && n == nb && m <= 1e-5) }'
}
# check NAME DIR_A DIR_B: training and validation losses the same.
check() {
  local msg msg2
  if msg=$(same loss "$2/metrics.jsonl" "$3/metrics.jsonl") &&
    msg2=$(same val_loss "$2/metrics.jsonl" "$3/metrics.jsonl"); then
    echo "ok   $1: losses $msg; validation $msg2"
  else
    fail "$1: losses ${msg:-?}; validation ${msg2:-?}"
  fi
}
# resumed_exactly NAME FULL RESUMED FROM: in the metrics of run directories FULL and RESUMED, the
# steps >= FROM have the same losses and validation losses (1e-6) and model clock (1e-9).
resumed_exactly() {
  local name=$1 a=$2/metrics.jsonl b=$3/metrics.jsonl from=$4 msg msg2 msg3
  if msg=$(compare loss "$a" "$b" 1e-6 "$from") &&
    msg2=$(compare val_loss "$a" "$b" 1e-6 "$from") &&
    msg3=$(compare sim_time_s "$a" "$b" 1e-9 "$from"); then
    echo "ok   $name: losses $msg; validation $msg2; model clock $msg3"
  else
    fail "$name: ${msg:-?} ${msg2:-?} ${msg3:-?}"
  fi
}
# expect_error NAME PATTERN ARGS...: `atoll ARGS` on EXPECT_NP ranks (default 2) fails on every
# rank, and every rank reports PATTERN (extended regex). Each rank runs to its own end
# (tests/each_rank_exit.sh says why): a rank left waiting for a peer is a hang, at the timeout.
expect_error() {
  local name=$1 pattern=$2 out rc np=${EXPECT_NP:-2} failed
  shift 2
  out=$(mpirun_each 120 -np "$np" "$each_rank_exit" "$atoll" "$@")
  rc=$?
  failed=$(ranks_exited "$out")
  if [ $rc -ne 0 ] || [ "$failed" -ne "$np" ]; then
    fail "$name: mpirun exit status $rc (124: timed out), $failed of $np ranks failed"
    echo "$out"; return
  fi
  # The second grep reads all its input (no -q): under pipefail, a grep -q that exits at the first
  # match would make the first grep die of SIGPIPE on long output, failing at random.
  for ((rank = 0; rank < np; rank++)); do
    if ! grep -E "rank $rank" <<<"$out" | grep -E -e "$pattern" >/dev/null; then
      fail "$name: rank $rank did not report /$pattern/"; echo "$out"; return
    fi
  done
  echo "ok   $name"
}
