#!/usr/bin/env bash
# The testbed really limits bandwidth, runs MPI across its hosts, and leaves nothing behind.
# usage: testbed_test.sh ATOLL_BINARY. Exit 77 (CTest: skipped, with the reason) where network
# namespaces cannot be created.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
atoll=$1
if ! ip netns add atoll-cap-probe 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs root with CAP_SYS_ADMIN): testbed tests not run"
  exit 77
fi
ip netns del atoll-cap-probe
trap '"$root/scripts/testbed" down >/dev/null 2>&1' EXIT
failures=0
tmp_agent=$(mktemp -u /tmp/atoll-stall-agent.XXXXXX)
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

"$root/scripts/testbed" up 4 --rate 1gbit || { echo "FAIL testbed up"; exit 1; }
[ "$("$root/scripts/testbed" status | wc -l)" -eq 4 ] || fail "status does not list 4 hosts"

# The limit holds: one TCP stream between two hosts gets within 10% of 1 Gbit/s, not more.
ip netns exec atoll-h1 iperf3 -s -1 -D -p 5299
sleep 0.5
mbps=$(ip netns exec atoll-h0 iperf3 -c 10.213.0.2 -p 5299 -t 2 -J | python3 -c \
  'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))')
echo "two-host transfer: $mbps Mbit/s at a 1gbit limit"
{ [ "$mbps" -ge 900 ] && [ "$mbps" -le 1000 ]; } || fail "transfer rate $mbps Mbit/s is not within 10% of 1000"

# MPI across the hosts, over TCP: every scheme verified. Open MPI's rsh launch occasionally leaves
# one host's daemon unstarted (seen here: 2 of 20 runs); scripts/testbed-mpirun detects that (not
# every rank started within --launch-timeout) and launches again, saying so.
timeout 400 "$root/scripts/testbed-mpirun" --launch-timeout 60 4 "$atoll" bench sync \
  --elements 100000 --density 0.01 --repeat 1 --verify --values integer \
  >/tmp/atoll-testbed-bench.out 2>&1
rc=$?
grep "launch stalled" /tmp/atoll-testbed-bench.out || true
if [ $rc -eq 0 ]; then
  echo "ok   bench sync on 4 testbed hosts"
else
  cat /tmp/atoll-testbed-bench.out; fail "bench sync on the testbed (exit $rc)"
fi

# A stalled launch is retried: an agent that never starts host 2's daemon on the first launch.
cat >"$tmp_agent" <<AGENT
#!/usr/bin/env bash
while [[ \${1:-} == -* ]]; do shift; done
if [ "\$1" = 10.213.0.2 ] && mkdir "$tmp_agent.once" 2>/dev/null; then exec sleep 600; fi
exec "$root/scripts/testbed-rsh" "\$@"
AGENT
chmod +x "$tmp_agent"
out=$(timeout 200 "$root/scripts/testbed-mpirun" --launch-timeout 10 --agent "$tmp_agent" 3 "$atoll" \
  bench sync --elements 10000 --density 0.01 --repeat 1 --verify --schemes zen 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "launch stalled: 0 of 3 ranks started after 10 s.*retrying" <<<"$out" &&
  grep -q "zen .* yes" <<<"$out"; then
  echo "ok   a stalled launch is detected and retried"
else
  echo "$out"; fail "stalled launch (exit $rc)"
fi
rm -rf "$tmp_agent" "$tmp_agent.once"

# The PyTorch peer (ProcessGroupGloo, dense and sparse allreduce) runs across the hosts and agrees
# with the dense reference.
if gloo=$(timeout 300 "$root/scripts/testbed-gloo" 4 --elements 100000 --density 0.01 --repeat 1 2>&1) \
    && [ "$(grep -c '"verified":true' <<<"$gloo")" -eq 2 ]; then
  echo "ok   gloo_dense and gloo_sparse on 4 testbed hosts"
else
  echo "$gloo"; fail "gloo peers on the testbed"
fi

# down removes every namespace, link and the bridge (they all live in the namespaces).
"$root/scripts/testbed" down
left=$(ip netns list | grep -c '^atoll-' || true)
[ "$left" -eq 0 ] || fail "$left atoll namespaces left after down"
ip link show | grep -q 'atoll\|10.213' && fail "links left in the root namespace"

# up cleans leftovers: a second up over a live testbed works.
"$root/scripts/testbed" up 2 --rate 100mbit >/dev/null && "$root/scripts/testbed" up 3 --rate 100mbit >/dev/null \
  && [ "$("$root/scripts/testbed" status | wc -l)" -eq 3 ] || fail "up over a live testbed"
"$root/scripts/testbed" down >/dev/null

# Bad input: clear errors.
out=$("$root/scripts/testbed" up 1 --rate 1gbit 2>&1) && fail "up 1 succeeded"
grep -q "N must be" <<<"$out" || fail "up 1: unclear error: $out"
out=$("$root/scripts/testbed" up 4 --rate fast 2>&1) && fail "up --rate fast succeeded"
grep -q "RATE must" <<<"$out" || fail "bad rate: unclear error: $out"
[ "$(ip netns list | grep -c '^atoll-' || true)" -eq 0 ] || fail "bad input left namespaces"
exit $((failures > 0))
