import pytest
import torch


@pytest.fixture(autouse=True)
def _no_torch_fastpath():
    """torch's fused inference path for nn.MultiheadAttention / TransformerEncoderLayer packs
    padded batches into nested tensors (different values at padded positions); compare with the
    documented reference path."""
    old = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(old)
