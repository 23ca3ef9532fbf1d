"""atoll for PyTorch: the "atoll" torch.distributed backend (docs/pytorch.md).

    import atoll_torch                   # starts MPI; registers the backend
    import torch.distributed as dist
    dist.init_process_group("atoll")     # under mpirun/srun: no environment variables needed

allreduce of a sparse COO tensor runs atoll's sparse synchronization (Zen by default; any scheme
of `atoll bench sync`, or auto: set_sparse_scheme); dense tensors use MPI's allreduce. broadcast,
allgather and barrier are supported; other collectives raise NotImplementedError.
"""

import atexit
import os
import socket
import sys
import traceback

import torch.distributed as _dist

# Open MPI loads its plugins with dlopen and resolves them against libmpi, so the libmpi that _C
# links must be loaded global (as mpi4py does).
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from . import _C
finally:
    sys.setdlopenflags(_flags)

__all__ = ["set_sparse_scheme", "last_stats", "SCHEMES"]

SCHEMES = tuple(_C.scheme_names())  # the names `atoll bench sync --schemes` takes

_C.init_mpi()
atexit.register(_C.finalize_mpi)


def _abort_on_uncaught(kind, value, tb):
    """An uncaught exception on one rank ends the whole job (MPI_Abort), as `python -m mpi4py`
    does: MPI_Finalize at exit would wait for the other ranks, which wait in their next
    collective for this one."""
    traceback.print_exception(kind, value, tb)
    sys.stderr.flush()
    _C.abort_job(1)


sys.excepthook = _abort_on_uncaught


def _rendezvous_environment():
    """torch's default init_method (env://) needs a store: rank 0's host and a port free there,
    agreed over MPI (127.0.0.1 when every rank is on rank 0's node). RANK and WORLD_SIZE come from
    MPI; MASTER_ADDR/MASTER_PORT set by the user are kept when rank 0 has them, and must then be
    the same on every rank. A disagreement is an error on every rank."""
    rank, size = _C.world_rank(), _C.world_size()
    problem = None
    for name, value in (("RANK", rank), ("WORLD_SIZE", size)):
        if name in os.environ and os.environ[name] != str(value):
            problem = (f"{name}={os.environ[name]} in the environment of rank {rank}, but MPI "
                       f"says {value}: unset it (atoll_torch takes both from MPI)")
    mine = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    chosen = ""
    if rank == 0:
        address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not address:
            address = "127.0.0.1" if _C.ranks_on_node() == size else socket.gethostname()
        if not port:
            with socket.socket() as s:  # a port free now; the store binds it right after
                s.bind(("", 0))
                port = str(s.getsockname()[1])
        chosen = f"{address}:{port}"
    chosen = _C.broadcast_string(chosen, 0)
    if problem is None and mine != ":" and mine != chosen:
        problem = (f"MASTER_ADDR:MASTER_PORT is {mine} on rank {rank} but {chosen} on rank 0: "
                   "set them on every rank alike, or on none")
    if _C.any_rank(problem is not None):
        raise RuntimeError(f"atoll_torch: {problem or 'another rank has a bad rendezvous environment (it says why)'}")
    address, port = chosen.rsplit(":", 1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR=address, MASTER_PORT=port)


def _create(options, pg_options):
    """torch's creator (extended API): the group's world ranks come with the options."""
    if pg_options is not None:
        raise ValueError("the atoll backend takes no pg_options: choose the sparse scheme with "
                         "atoll_torch.set_sparse_scheme(group, name)")
    return _C.ProcessGroupAtoll(list(options.global_ranks_in_group), options.group_rank,
                                options.group_size, options.timeout.total_seconds())


_rendezvous_environment()
_dist.Backend.register_backend("atoll", _create, extended_api=True)


def _atoll_group(group):
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    if not isinstance(pg, _C.ProcessGroupAtoll):
        raise TypeError(f"not an atoll process group: {type(pg).__name__} "
                        "(dist.init_process_group('atoll') or dist.new_group(backend='atoll'))")
    return pg


def set_sparse_scheme(group=None, scheme="zen"):
    """The scheme that sums sparse tensors on `group` (None: the default group). Every rank of
    the group must set the same one (a sparse allreduce with different schemes is an error on
    every rank). ValueError names the valid schemes."""
    _atoll_group(group).set_sparse_scheme(scheme)


def last_stats(group=None):
    """What the group's last sparse allreduce did on this rank (scheme, chosen, elements, nnz,
    bytes, sync_s, convert_s, phases) and how many sparse and dense allreduces it has run."""
    return _atoll_group(group).stats()
