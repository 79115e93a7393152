import os

import pytest
import torch

# Under pytest-xdist each worker gets one core: torch's own thread pool on top of the workers
# oversubscribes the CPU, and small ops (the estimators' training steps) then run ~8x slower.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

# The Triton kernels run on CPU tensors under Triton's interpreter (tests/core/test_triton.py);
# Triton reads this when the kernels are first imported, which only their backends do.
os.environ.setdefault("TRITON_INTERPRET", "1")

# Processes of attnlab.distributed.spawn fork from one server that has imported torch and the
# test workers once, instead of starting a fresh interpreter per rank (about 1.6 s each).
def _forkserver_for_spawn():
    import multiprocessing

    from attnlab.distributed import launch

    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["torch", "torch.distributed", "attnlab", "attnlab.distributed",
         "tests.distributed._workers"])
    launch.START_METHOD = "forkserver"


_forkserver_for_spawn()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def tiles():
    """``tiles(tiled=(bq, bk), blocksparse=dict(block=..., band_block=..., run=...,
    items=...), triton=dict(block_m=..., ...))``: the backends' own tile-size contexts, entered
    for the rest of the test (small tiles make short inputs cross many tile borders)."""
    from contextlib import ExitStack

    from attnlab.core.backends import blocksparse, gpu, tiled

    stack = ExitStack()

    def use(tiled_sizes=None, blocksparse_sizes=None, triton_sizes=None):
        if tiled_sizes is not None:
            stack.enter_context(tiled.tile_sizes(*tiled_sizes))
        if blocksparse_sizes is not None:
            stack.enter_context(blocksparse.tile_sizes(**blocksparse_sizes))
        if triton_sizes is not None:
            stack.enter_context(gpu.tile_sizes(**triton_sizes))

    yield use
    stack.close()
