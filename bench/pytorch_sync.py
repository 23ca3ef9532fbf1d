"""Time one sparse allreduce through torch.distributed (dist.all_reduce of a sparse COO tensor)
with the atoll backend or Gloo, on the gradients `atoll bench sync --dump-trace DIR` wrote, so
that the same tensors can be timed through `atoll bench sync` itself.

    mpirun -np 4 build/atoll bench sync --schemes zen --elements 16777216 --density 0.01 \\
        --zipf 1.1 --values integer --dump-trace /tmp/t --repeat 1
    mpirun -np 4 python3 bench/pytorch_sync.py --trace /tmp/t --backend atoll --scheme zen

Each repetition: a barrier, then dist.all_reduce on a fresh copy of this rank's tensor; a call's
time is the slowest rank's (MPI_Wtime-like: time.perf_counter), the median over repetitions is
reported. Before timing, one call's result is checked against the sum of every rank's trace
(read by every rank: a shared directory, as under one mpirun on one machine or the testbed).
Prints one JSON line on rank 0 (and appends it to --json FILE).
"""
import argparse
import json
import os
import statistics
import struct
import sys
import time
from pathlib import Path

try:
    import atoll_torch
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build" / "python"))
    import atoll_torch
import torch
import torch.distributed as dist

HEADER = struct.Struct("<8sIIQQIIQ")  # include/atoll/sparse/trace.h, version 1


def read_trace(directory, rank, step=0):
    """One rank's gradient from an atoll trace file as a coalesced 1-D sparse tensor (the
    checksum is not recomputed here; sizes are checked against the file's length)."""
    path = Path(directory) / f"step-{step:06d}.rank-{rank:05d}.atg"
    data = path.read_bytes()
    magic, version, index_bytes, elements, nnz, _, _, _ = HEADER.unpack_from(data)
    if magic != b"ATOLLGRD" or version != 1 or index_bytes not in (4, 8):
        raise ValueError(f"{path}: not an atoll trace (version 1)")
    if len(data) != HEADER.size + nnz * (index_bytes + 4) + 8:
        raise ValueError(f"{path}: {len(data)} bytes do not hold {nnz} entries")
    dtype = torch.int32 if index_bytes == 4 else torch.int64
    end = HEADER.size + nnz * index_bytes
    idx = torch.frombuffer(bytearray(data[HEADER.size:end]), dtype=dtype).long()
    if index_bytes == 4:
        idx &= 0xFFFFFFFF  # unsigned 32-bit indices (torch 1.13 has no uint32)
    vals = torch.frombuffer(bytearray(data[end:end + nnz * 4]), dtype=torch.float32)
    return torch.sparse_coo_tensor(idx.unsqueeze(0), vals, (elements,))._coalesced_(True)


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="directory of atoll bench sync --dump-trace")
    ap.add_argument("--backend", choices=["atoll", "gloo"], default="atoll")
    ap.add_argument("--scheme", default="zen", help="atoll: the sparse scheme")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", help="append the result line to this file (rank 0)")
    args = ap.parse_args()
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.backend == "atoll":
        atoll_torch.set_sparse_scheme(None, args.scheme)
    mine = read_trace(args.trace, rank)
    check = mine.clone()
    dist.all_reduce(check)
    expected = sum(read_trace(args.trace, r).to_dense() for r in range(size))
    if not torch.equal(check.to_dense(), expected):
        raise SystemExit(f"rank {rank}: the {args.backend} sum differs from the traces' sum")
    times = []
    for i in range(args.warmup + args.repeat):
        t = mine.clone()
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(t)
        elapsed = slowest(time.perf_counter() - start)
        if i >= args.warmup:
            times.append(elapsed)
    row = {"backend": args.backend, "scheme": args.scheme if args.backend == "atoll" else "gloo",
           "ranks": size, "elements": mine.shape[0], "nnz": mine._nnz(),
           "median_s": statistics.median(times), "min_s": min(times), "repeat": args.repeat}
    if args.backend == "atoll":
        s = atoll_torch.last_stats()
        row.update(chosen=s["chosen"], scheme_s=slowest(s["sync_s"]),
                   convert_s=slowest(s["convert_s"]))
    if rank == 0:
        line = json.dumps(row)
        print(line)
        if args.json:
            with open(args.json, "a") as f:
                f.write(line + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
