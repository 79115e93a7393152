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


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
