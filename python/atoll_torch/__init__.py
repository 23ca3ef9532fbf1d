"""atoll for PyTorch: the "atoll" torch.distributed backend (docs/pytorch.md).

    import atoll_torch                   # starts MPI; registers the backend
    import torch.distributed as dist
    dist.init_process_group("atoll")     # under mpirun/srun: no environment variables needed

allreduce of a sparse COO tensor runs atoll's sparse synchronization (Zen by default; any scheme
of `atoll bench sync`, or auto: set_sparse_scheme); dense tensors use MPI's allreduce. broadcast,
allgather and barrier are supported; other collectives raise NotImplementedError.
"""

import atexit
import ctypes
import ctypes.util
import os
import socket

# Open MPI loads its plugins with dlopen and resolves them against libmpi: it must be global.
_libmpi = ctypes.util.find_library("mpi")
if _libmpi is None:
    raise ImportError("atoll_torch: libmpi not found (apt-get install libopenmpi-dev)")
ctypes.CDLL(_libmpi, mode=ctypes.RTLD_GLOBAL)

import torch.distributed as _dist  # noqa: E402  (after libmpi)

from . import _C  # noqa: E402

__all__ = ["set_sparse_scheme", "last_stats", "SCHEMES"]

SCHEMES = tuple(_C.scheme_names())  # the names `atoll bench sync --schemes` takes

_C.init_mpi()
atexit.register(_C.finalize_mpi)


def _rendezvous_environment():
    """torch's default init_method (env://) needs a store: rank 0's host and a free port there,
    agreed over MPI. A value the user set is kept (and must agree with MPI)."""
    rank, size = _C.world_rank(), _C.world_size()
    for name, value in (("RANK", rank), ("WORLD_SIZE", size)):
        if name in os.environ and int(os.environ[name]) != value:
            raise RuntimeError(f"atoll_torch: {name}={os.environ[name]} in the environment, but "
                               f"MPI says {value}: unset it (atoll_torch takes both from MPI)")
        os.environ[name] = str(value)
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        address = port = ""
        if rank == 0:
            address = "127.0.0.1" if size == 1 else socket.gethostname()
            with socket.socket() as s:  # a port free now; the store binds it right after
                s.bind(("", 0))
                port = str(s.getsockname()[1])
        os.environ.setdefault("MASTER_ADDR", _C.broadcast_string(address, 0))
        os.environ.setdefault("MASTER_PORT", _C.broadcast_string(port, 0))


def _create(options, pg_options):
    """torch's creator (extended API): the group's world ranks come with the options."""
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
    the group must set the same one. ValueError names the valid schemes."""
    _atoll_group(group).set_sparse_scheme(scheme)


def last_stats(group=None):
    """What the group's last sparse allreduce did on this rank (scheme, chosen, elements, nnz,
    bytes, sync_s, convert_s, phases) and how many sparse and dense allreduces it has run."""
    return _atoll_group(group).stats()
