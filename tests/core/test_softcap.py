"""Logit soft-capping (Gemma 2: s -> c tanh(s / c) on the scaled scores, before the mask) on
every exact backend that declares it, outputs, lse and gradients against the float64
reference; the reference itself against the formula written by hand."""

import math

import pytest
import torch

from attnlab import attention, list_backends, masks, which_backend
from tests.helpers import assert_backend_matches

CAP = 5.0


def _qkv(n_q=37, n_k=53, d=24, d_v=11, scale=4.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, n_q, d, generator=g, dtype=torch.float64) * scale   # big logits
    k = torch.randn(2, 3, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, n_k, d_v, generator=g, dtype=torch.float64)
    return q, k, v


def _bias(n_q, n_k):
    g = torch.Generator().manual_seed(5)
    b = torch.randn(n_q, n_k, generator=g, dtype=torch.float64)
    b[torch.rand(n_q, n_k, generator=g) > 0.7] = float("-inf")
    return b


def test_reference_is_the_formula():
    q, k, v = _qkv()
    bias = _bias(37, 53)
    s = q @ k.transpose(-1, -2) / math.sqrt(24) / 2.0                   # temperature 2
    s = CAP * torch.tanh(s / CAP) + bias                                # cap, then the mask
    want = torch.softmax(s, -1) @ v
    got = attention(q, k, v, mask=bias, temperature=2.0, softcap=CAP, backend="reference")
    assert torch.allclose(got, want, atol=1e-12)
    assert which_backend(q, k, v, softcap=CAP) in ("reference", "tiled")


@pytest.fixture
def small_tiles(tiles):
    tiles(tiled_sizes=(16, 32), blocksparse_sizes=dict(block=(16, 16)))


MASKS = {
    "none": lambda nq, nk: {},
    "causal": lambda nq, nk: {"causal": True},
    "window": lambda nq, nk: {"window": (6, 2)},
    "bool": lambda nq, nk: {"mask": torch.rand(2, 1, nq, nk,
                                                generator=torch.Generator().manual_seed(2)) > 0.3},
    "float": lambda nq, nk: {"mask": _bias(nq, nk)},
    "dilated": lambda nq, nk: {"mask": masks.dilated(2, 12, 12, offset=nk - nq)},
}
CASES = [(b, m) for b in ("tiled", "blocksparse") for m in MASKS
         if not (b == "blocksparse" and m in ("none", "float"))]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n_q, n_k", [(37, 53), (53, 37), (1, 40)])
@pytest.mark.parametrize("backend, mask", CASES)
def test_softcap_matches_reference(backend, mask, n_q, n_k, dtype, small_tiles):
    q, k, v = _qkv(n_q, n_k)
    kw = MASKS[mask](n_q, n_k)
    if isinstance(kw.get("mask"), torch.Tensor) and kw["mask"].dtype.is_floating_point:
        kw["mask"] = kw["mask"].to(dtype)
    assert_backend_matches(q, k, v, backend, dtype, softcap=CAP, **kw)


def test_softcap_on_the_band_path_and_with_dropout(small_tiles):
    # a pure band normally takes blocksparse's fused band path; with a cap it may not fuse
    q, k, v = _qkv(200, 200)
    assert_backend_matches(q, k, v, "blocksparse", torch.float32, softcap=CAP, window=(20, 5))
    g = [torch.Generator().manual_seed(9) for _ in range(2)]
    a = attention(q, k, v, softcap=CAP, dropout_p=0.3, generator=g[0], backend="reference")
    b = attention(q, k, v, softcap=CAP, dropout_p=0.3, generator=g[1], backend="tiled")
    assert torch.allclose(a, b, atol=1e-12)


def test_backends_without_softcap_say_so_and_name_who_can():
    q, k, v = _qkv()
    assert not list_backends()["sdpa"].capabilities.softcap
    with pytest.raises(ValueError, match="does not take softcap.*reference, tiled"):
        attention(q, k, v, softcap=CAP, backend="sdpa")
    for bad in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="softcap must be a finite number > 0"):
            attention(q, k, v, softcap=bad)


def test_cap_bounds_the_logits_and_keeps_gradients_alive():
    # Scores of a few hundred saturate plain softmax (one-hot rows, near-zero gradient);
    # capped at 5 the weights stay spread and the gradient reaches q.
    q, k, v = _qkv(scale=60.0)
    q.requires_grad_()
    lse = attention(q, k, v, softcap=CAP, return_lse=True, backend="tiled").lse
    assert (lse <= CAP + math.log(53) + 1e-9).all()
    capped = attention(q, k, v, softcap=CAP, return_weights=True).weights
    plain = attention(q, k, v, return_weights=True).weights
    assert capped.amax(-1).mean() < 0.9 < plain.amax(-1).mean()
