# The atoll backend's tests run under mpirun (every rank runs the same tests, in the same order:
# they are collective). One process group for the whole session.
import pytest


@pytest.fixture(scope="session")
def world():
    from datetime import timedelta

    import atoll_torch  # noqa: F401  (starts MPI, registers "atoll")
    import torch.distributed as dist
    if not dist.is_initialized():
        # a test that desynchronizes the ranks ends in the watchdog's message, not a silent kill
        dist.init_process_group("atoll", timeout=timedelta(seconds=120))
    return dist.get_rank(), dist.get_world_size()
