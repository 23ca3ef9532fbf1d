"""The "atoll" torch.distributed backend (atoll_torch) against references, at any world size.

Every rank makes every rank's input from a seed, so each can compute the exact reference itself:
sparse sums through torch.sparse.sum over a stacked tensor, and also Gloo's result on the same
tensors (a Gloo group over the same ranks).
"""
import pytest
import torch
import torch.distributed as dist

import atoll_torch

SCHEMES = atoll_torch.SCHEMES


def sparse_input(rank, shape, nnz, seed, sparse_dim=None, coalesce=True):
    """Rank `rank`'s sparse tensor: `nnz` random positions (duplicates when not coalesced),
    always including index 0 and the last row on rank 0; integer values, so every summation order
    gives the same float result."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    sparse_dim = len(shape) if sparse_dim is None else sparse_dim
    idx = torch.stack([torch.randint(0, shape[k], (nnz,), generator=g) for k in range(sparse_dim)])
    if rank == 0 and nnz >= 2:
        idx[:, 0] = 0
        idx[:, 1] = torch.tensor([s - 1 for s in shape[:sparse_dim]])
    vals = torch.randint(-8, 9, (nnz,) + tuple(shape[sparse_dim:]), generator=g).float()
    t = torch.sparse_coo_tensor(idx, vals, shape)
    return t.coalesce() if coalesce else t


def reference(inputs):
    """The sum via torch.sparse.sum over the inputs stacked along a new leading dimension."""
    parts = [t.coalesce() for t in inputs]
    idx = torch.cat([torch.cat([torch.full((1, p._nnz()), r), p._indices()])
                     for r, p in enumerate(parts)], dim=1)
    vals = torch.cat([p._values() for p in parts])
    stacked = torch.sparse_coo_tensor(idx, vals, (len(parts),) + tuple(parts[0].shape))
    return torch.sparse.sum(stacked, dim=0).to_dense()


def check_sparse(world, scheme, shape, nnz_of, seed, sparse_dim=None, coalesce=True):
    rank, size = world
    atoll_torch.set_sparse_scheme(None, scheme)
    inputs = [sparse_input(r, shape, nnz_of(r), seed, sparse_dim, coalesce) for r in range(size)]
    t = inputs[rank].clone()
    dist.all_reduce(t)
    assert t.is_sparse and t.is_coalesced()
    assert t.sparse_dim() == inputs[rank].sparse_dim() and t.shape == inputs[rank].shape
    assert torch.equal(t.to_dense(), reference(inputs))
    assert atoll_torch.last_stats()["chosen"] == scheme or scheme == "auto"
    return inputs


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sparse_vector_every_scheme(world, scheme):
    check_sparse(world, scheme, (1000,), lambda r: 50 + 7 * r, seed=1)


@pytest.mark.parametrize("scheme", ["zen", "zen_coo", "sparcml", "allreduce"])
def test_embedding_rows(world, scheme):
    # nn.Embedding(sparse=True)'s gradient: rows x width, sparse_dim 1
    check_sparse(world, scheme, (97, 8), lambda r: 5 + r, seed=2, sparse_dim=1)


def test_sparse_matrix_and_uncoalesced(world):
    check_sparse(world, "zen", (31, 17), lambda r: 40, seed=3, coalesce=False)


def test_empty_on_some_ranks(world):
    check_sparse(world, "zen", (64, 4), lambda r: 0 if r % 2 == 0 else 3, seed=4, sparse_dim=1)


def test_empty_everywhere(world):
    check_sparse(world, "zen", (10,), lambda r: 0, seed=5)


def test_same_as_gloo(world):
    rank, size = world
    gloo = dist.new_group(backend="gloo")
    inputs = [sparse_input(r, (500, 3), 20, seed=6, sparse_dim=1) for r in range(size)]
    ours, theirs = inputs[rank].clone(), inputs[rank].clone()
    atoll_torch.set_sparse_scheme(None, "zen")
    dist.all_reduce(ours)
    dist.all_reduce(theirs, group=gloo)
    # freed here, not at exit: torch 1.13 can deadlock dropping a gloo group's last reference
    # while holding the GIL (examples/pytorch_ddp.py)
    dist.destroy_process_group(gloo)
    assert torch.equal(ours.to_dense(), theirs.to_dense())


def test_stats_count_zen(world):
    rank, size = world
    atoll_torch.set_sparse_scheme(None, "zen")
    before = atoll_torch.last_stats()["sparse_calls"]
    t = sparse_input(rank, (50, 4), 3, seed=7, sparse_dim=1)
    dist.all_reduce(t)
    s = atoll_torch.last_stats()
    assert s["sparse_calls"] == before + 1 and s["chosen"] == "zen" and s["scheme"] == "zen"
    assert s["elements"] == 200 and s["nnz"] == 4 * sparse_input(rank, (50, 4), 3, 7, 1)._nnz()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_dense_sum(world, dtype):
    rank, size = world
    t = (torch.arange(12).reshape(3, 4) * (rank + 1)).to(dtype)
    dist.all_reduce(t)
    assert torch.equal(t, (torch.arange(12).reshape(3, 4) * sum(range(1, size + 1))).to(dtype))


def test_dense_min_max_and_strided(world):
    rank, size = world
    t = torch.full((4,), float(rank))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.tolist() == [float(size - 1)] * 4
    m = (torch.arange(8.0).reshape(2, 4) + rank).t()
    assert not m.is_contiguous()
    dist.all_reduce(m, op=dist.ReduceOp.MIN)
    assert torch.equal(m, torch.arange(8.0).reshape(2, 4).t())


def test_broadcast_allgather_barrier(world):
    rank, size = world
    root = size - 1
    b = torch.full((3, 2), float(rank))
    dist.broadcast(b, root)
    assert torch.equal(b, torch.full((3, 2), float(root)))
    out = [torch.empty(2, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(out, torch.tensor([rank, 10 * rank]))
    assert [o.tolist() for o in out] == [[r, 10 * r] for r in range(size)]
    dist.barrier()


def test_subgroup(world):
    rank, size = world
    members = list(range(max(1, size - 1)))
    group = dist.new_group(members, backend="atoll")
    if rank in members:
        t = sparse_input(rank, (40,), 5, seed=8)
        dist.all_reduce(t, group=group)
        assert torch.equal(t.to_dense(),
                           reference([sparse_input(r, (40,), 5, seed=8) for r in members]))


def test_shapes_differ_across_ranks(world):
    rank, size = world
    t = sparse_input(rank, (100 + (rank % 2),), 3, seed=9)
    if size == 1:
        dist.all_reduce(t)
        return
    with pytest.raises(RuntimeError, match="calls differ: rank 0 called allreduce of a sparse"):
        dist.all_reduce(t)
    d = torch.zeros(3 + rank % 2)
    with pytest.raises(RuntimeError, match="calls differ"):
        dist.all_reduce(d)
    x = torch.ones(2, dtype=torch.float64 if rank == 1 else torch.float32)
    with pytest.raises(RuntimeError, match="calls differ"):
        dist.all_reduce(x)
    ok = torch.ones(2)  # the group still works
    dist.all_reduce(ok)
    assert ok.tolist() == [float(size)] * 2


def test_wrong_dtype_is_refused_on_every_rank(world):
    rank, size = world
    t = sparse_input(rank, (10,), 2, seed=10).double()
    with pytest.raises(RuntimeError, match="sums float32 values, not Double"):
        dist.all_reduce(t)
    h = torch.ones(2, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="not Half"):
        dist.all_reduce(h)
    # only one rank wrong: the others raise too, naming it
    bad = torch.ones(2, dtype=torch.float16 if rank == size - 1 else torch.float32)
    with pytest.raises(RuntimeError, match=f"rank {size - 1}: dense allreduce takes"):
        dist.all_reduce(bad)


def test_unsupported_collectives_raise_not_implemented(world):
    rank, size = world
    with pytest.raises(NotImplementedError, match="does not implement reduce"):
        dist.reduce(torch.ones(2), 0)
    with pytest.raises(NotImplementedError, match="does not implement alltoall"):
        dist.all_to_all_single(torch.empty(size), torch.ones(size))
    with pytest.raises(NotImplementedError, match="does not implement send"):
        dist.send(torch.ones(1), (rank + 1) % size)


def test_unknown_scheme(world):
    with pytest.raises(ValueError, match="zen_coo"):
        atoll_torch.set_sparse_scheme(None, "zenn")


def test_more_than_2_32_elements(world):
    # 64-bit indices (M > 2^32); sparcml, whose memory does not grow with M
    rank, size = world
    atoll_torch.set_sparse_scheme(None, "sparcml")
    m = 2**33 + 5
    t = torch.sparse_coo_tensor(torch.tensor([[0, 2**32 + rank, m - 1]]),
                                torch.tensor([1.0, 2.0, 3.0]), (m,))
    dist.all_reduce(t)
    expected = {0: float(size), m - 1: 3.0 * size}
    for r in range(size):
        expected[2**32 + r] = 2.0
    assert dict(zip(t._indices()[0].tolist(), t._values().tolist())) == expected
    assert atoll_torch.last_stats()["elements"] == m


def test_different_collectives_or_schemes_across_ranks(world):
    rank, size = world
    if size == 1:
        return
    with pytest.raises(RuntimeError, match="calls differ: rank 0 called allreduce"):
        if rank == 0:
            dist.all_reduce(torch.ones(2))
        else:
            dist.all_gather([torch.empty(2) for _ in range(size)], torch.ones(2))
    with pytest.raises(RuntimeError, match="calls differ.*barrier"):
        if rank == 0:
            dist.barrier()
        else:
            dist.broadcast(torch.ones(1), 0)
    atoll_torch.set_sparse_scheme(None, "zen" if rank == 0 else "sparcml")
    with pytest.raises(RuntimeError, match="scheme zen.*scheme sparcml"):
        dist.all_reduce(sparse_input(rank, (20,), 2, seed=11))
    atoll_torch.set_sparse_scheme(None, "zen")


def test_zero_size_dimensions(world):
    rank, size = world
    for shape, sparse_dim in (((0,), 1), ((5, 0), 1), ((0, 3), 2)):
        t = torch.sparse_coo_tensor(torch.empty(sparse_dim, 0, dtype=torch.long),
                                    torch.empty((0,) + shape[sparse_dim:]), shape)
        dist.all_reduce(t)
        assert t.is_coalesced() and t.shape == shape and t._nnz() == 0


def test_inputs_that_require_grad(world):
    rank, size = world
    leaf = sparse_input(rank, (30, 2), 4, seed=12, sparse_dim=1).requires_grad_()
    expected = reference([sparse_input(r, (30, 2), 4, seed=12, sparse_dim=1)
                          for r in range(size)])
    dist.all_reduce(leaf)
    assert leaf.is_coalesced() and torch.equal(leaf.detach().to_dense(), expected)
    p = torch.nn.Parameter(torch.ones(3, 2)).t()  # a non-contiguous view of a leaf
    dist.all_reduce(p.data)
    assert torch.equal(p.detach(), torch.full((2, 3), float(size)))
    with pytest.raises(RuntimeError, match="overlaps itself"):
        dist.all_reduce(torch.ones(1).expand(4))
