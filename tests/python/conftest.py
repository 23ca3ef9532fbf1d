# The atoll backend's tests run under mpirun (every rank runs the same tests, in the same order:
# they are collective). One process group for the whole session.
import pytest


@pytest.fixture(scope="session")
def world():
    import atoll_torch  # noqa: F401  (starts MPI, registers "atoll")
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("atoll")
    return dist.get_rank(), dist.get_world_size()
