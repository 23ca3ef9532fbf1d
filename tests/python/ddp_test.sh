#!/usr/bin/env bash
# DDP unchanged on the atoll backend: 20 steps of examples/pytorch_ddp.py at 4 ranks with
# --backend atoll and --backend gloo, same seed: the same losses (<= 1e-5 relative at every
# step), and the embedding gradient went through Zen (atoll_torch.last_stats on rank 0).
# usage: ddp_test.sh PYTHON   (PYTHONPATH holds build/python)
set -euo pipefail
python=${1:?usage: ddp_test.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for backend in atoll gloo; do
  mpirun --allow-run-as-root --oversubscribe -np 4 "$python" "$here/../../examples/pytorch_ddp.py" \
    --backend "$backend" --steps 20 --seed 3 --json "$work/$backend.json" >"$work/$backend.log"
done
"$python" - "$work/atoll.json" "$work/gloo.json" <<'PY'
import json, sys
a, g = (json.load(open(f)) for f in sys.argv[1:3])
assert len(a["losses"]) == len(g["losses"]) == 20, (len(a["losses"]), len(g["losses"]))
worst = max(abs(x - y) / abs(y) for x, y in zip(a["losses"], g["losses"]))
print(f"losses atoll {a['losses'][0]:.6f} .. {a['losses'][-1]:.6f}, gloo {g['losses'][0]:.6f} .. "
      f"{g['losses'][-1]:.6f}; max relative difference {worst:.2e}")
assert worst <= 1e-5, f"losses differ: {worst:.2e} > 1e-5"
assert a["losses"][-1] < a["losses"][0], "the loss did not fall"
s = a["stats"]
assert s["chosen"] == "zen" and s["sparse_calls"] > 0 and s["bytes_sent"] > 0, s
print(f"embedding gradient through zen: {s['sparse_calls']} sparse allreduces, last one "
      f"{s['nnz']} elements of {s['elements']}")
PY
