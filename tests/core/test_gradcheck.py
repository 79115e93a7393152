"""torch.autograd.gradcheck in float64 for the reference and the custom tiled backward."""

import pytest
import torch

from attnlab import attention


@pytest.mark.parametrize("backend", ["reference", "tiled"])
@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window": (2, 1), "temperature": 0.7},
                                {"mask": "empty-row"}, {"lse": True}])
def test_gradcheck(backend, kw, tiles):
    tiles(tiled_sizes=(3, 4))
    kw = dict(kw)
    q = torch.randn(2, 7, 5, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 9, 5, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 9, 3, dtype=torch.float64, requires_grad=True)
    if kw.get("mask") == "empty-row":
        mask = torch.rand(7, 9) > 0.3
        mask[2] = False
        kw["mask"] = mask
    use_lse = kw.pop("lse", False)

    def f(q, k, v):
        res = attention(q, k, v, backend=backend, return_lse=True, **kw)
        if use_lse:
            return res.out, res.lse
        return res.out

    assert torch.autograd.gradcheck(f, (q, k, v))
