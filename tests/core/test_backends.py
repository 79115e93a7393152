"""Every exact backend against the float64 reference: outputs, lse and dQ, dK, dV.

Tolerances are relative to the plain reference run in the same precision (tests/helpers.py).
"""

import pytest
import torch

from attnlab import attention, masks
from tests.helpers import assert_backend_matches, loose_shift_inputs

# (batch, N_q, N_k, D_k, D_v): distinct sizes so a swapped axis fails.
SMALL_SHAPES = [
    ((2, 3), 1, 1, 16, 16),
    ((1, 2), 113, 113, 40, 40),
    ((2, 1), 37, 113, 59, 23),     # N_q < N_k
    ((1, 2), 113, 37, 40, 17),     # N_q > N_k: causal leaves the first rows empty
]


def _bool_mask(shape, n_q, n_k):
    g = torch.Generator().manual_seed(3)
    m = torch.rand(shape[0], 1, n_q, n_k, generator=g) > 0.4
    m[:, :, n_q // 2] = False                                   # a fully masked row
    return m


def _float_mask(shape, n_q, n_k):
    g = torch.Generator().manual_seed(4)
    bias = torch.randn(n_q, n_k, generator=g, dtype=torch.float64)
    bias[torch.rand(n_q, n_k, generator=g) > 0.7] = float("-inf")
    bias[0] = float("-inf")                                     # a fully masked row
    return bias


def _segments(shape, n_q, n_k):
    return masks.segments(torch.arange(n_q) * 3 // n_q, torch.arange(n_k) * 3 // n_k)


def _padding(shape, n_q, n_k):
    lengths = torch.tensor([max(n_k - 3, 1), 0][: shape[0]])    # the second sequence is empty
    return masks.key_padding(lengths)


MASKS = {
    "none": lambda shape, n_q, n_k: {},
    "bool": lambda shape, n_q, n_k: {"mask": _bool_mask(shape, n_q, n_k)},
    "float": lambda shape, n_q, n_k: {"mask": _float_mask(shape, n_q, n_k)},
    "causal": lambda shape, n_q, n_k: {"causal": True},
    "window": lambda shape, n_q, n_k: {"window": (3, 2)},
    "causal+window": lambda shape, n_q, n_k: {"causal": True, "window": 5},
    "causal+bool": lambda shape, n_q, n_k: {"causal": True, "mask": _bool_mask(shape, n_q, n_k)},
    "dilated": lambda shape, n_q, n_k: {"mask": masks.dilated(3, 20, 20, offset=n_k - n_q)},
    "segments": lambda shape, n_q, n_k: {"mask": _segments(shape, n_q, n_k)},
    "key_padding": lambda shape, n_q, n_k: {"mask": _padding(shape, n_q, n_k)},
    "window|global": lambda shape, n_q, n_k: {
        "mask": masks.or_masks(masks.window(4, 4, offset=n_k - n_q), masks.global_tokens(2))},
}


def _inputs(shape, n_q, n_k, d_k, d_v, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, n_q, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(*shape, n_k, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(*shape, n_k, d_v, generator=g, dtype=torch.float64)
    return q, k, v


def _kwargs(mask_name, shape, n_q, n_k, dtype):
    kw = MASKS[mask_name](shape, n_q, n_k)
    if isinstance(kw.get("mask"), torch.Tensor) and kw["mask"].dtype.is_floating_point:
        kw["mask"] = kw["mask"].to(dtype)
    return kw


@pytest.fixture
def small_tiles(tiles):
    """Tiles far smaller than the sequences so that every edge case crosses tile borders."""
    tiles(tiled_sizes=(16, 32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("shape", SMALL_SHAPES,
                         ids=lambda s: f"{s[0]}-{s[1]}x{s[2]}-d{s[3]}/{s[4]}")
@pytest.mark.parametrize("backend", ["sdpa", "tiled"])
def test_backend_matches_reference(backend, shape, mask_name, dtype, small_tiles):
    batch, n_q, n_k, d_k, d_v = shape
    q, k, v = _inputs(batch, n_q, n_k, d_k, d_v)
    kw = _kwargs(mask_name, batch, n_q, n_k, dtype)
    # bf16 reference on CPU is itself the baseline; the float mask must match its dtype there.
    assert_backend_matches(q, k, v, backend, dtype, **kw)


@pytest.mark.parametrize("n", [1023, 1025])
@pytest.mark.parametrize("mask_name", ["none", "causal", "float"])
@pytest.mark.parametrize("backend", ["sdpa", "tiled"])
def test_lengths_straddling_the_default_tile(backend, n, mask_name):
    # Default tiles (512 x 1024): 1023 keys fill one key tile short, 1025 spill one key over.
    q, k, v = _inputs((1, 2), n, n, 64, 64)
    kw = _kwargs(mask_name, (1, 2), n, n, torch.float32)
    assert_backend_matches(q, k, v, backend, torch.float32, **kw)


@pytest.mark.parametrize("backend", ["reference", "sdpa", "tiled"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16],
                         ids=str)
def test_fully_masked_rows_contract(backend, dtype, small_tiles):
    q, k, v = (torch.randn(2, 3, 40, 24, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 3, 40, 40) > 0.5
    mask[:, :, 7] = False
    mask[1, :, 30:] = False
    want_lse = backend != "sdpa"
    res = attention(q, k, v, mask=mask, backend=backend, return_lse=want_lse)
    out = res.out if want_lse else res
    empty = ~mask.any(-1)                                           # (2, 3, 40)
    assert (out[empty] == 0).all()
    if want_lse:
        assert torch.isneginf(res.lse[empty]).all() and torch.isfinite(res.lse[~empty]).all()
    out.square().sum().backward()
    for g in (q.grad, k.grad, v.grad):
        assert torch.isfinite(g).all()
    assert (q.grad[empty] == 0).all()


def test_all_rows_masked_gives_zero_gradients_everywhere():
    for backend in ("reference", "sdpa", "tiled"):
        q, k, v = (torch.randn(1, 9, 8, requires_grad=True) for _ in range(3))
        out = attention(q, k, v, mask=torch.zeros(9, 9, dtype=torch.bool), backend=backend)
        out.sum().backward()
        assert (out == 0).all()
        assert all((g == 0).all() for g in (q.grad, k.grad, v.grad)), backend


@pytest.mark.parametrize("backend", ["sdpa", "tiled"])
def test_broadcast_leading_dims(backend):
    # One query set shared by all heads, keys per head, a mask per batch element.
    q = torch.randn(1, 1, 6, 8, dtype=torch.float64)
    k = torch.randn(2, 3, 9, 8, dtype=torch.float64)
    v = torch.randn(2, 1, 9, 5, dtype=torch.float64)
    mask = torch.rand(2, 1, 6, 9) > 0.3
    out = attention(q, k, v, mask=mask, backend=backend)
    ref = attention(q, k, v, mask=mask, backend="reference")
    assert out.shape == (2, 3, 6, 5) and torch.allclose(out, ref)


def test_tiled_lse_gradient_matches_reference(small_tiles):
    q, k, v = (torch.randn(2, 50, 12, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grads = {}
    for backend in ("reference", "tiled"):
        res = attention(q, k, v, causal=True, backend=backend, return_lse=True)
        grads[backend] = torch.autograd.grad((res.out.sum() + res.lse.sin().sum()), (q, k, v))
    for a, b in zip(grads["reference"], grads["tiled"]):
        assert torch.allclose(a, b, atol=1e-12)


def test_tiled_gradient_with_window_skipping_tiles(small_tiles):
    # Band narrower than a tile: most tiles are skipped, some fully kept, some partial.
    q, k, v = _inputs((1, 2), 200, 200, 16, 16)
    assert_backend_matches(q, k, v, "tiled", torch.float32, window=(40, 3))


@pytest.mark.parametrize("scale", [1.0, 60.0])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_shift_bound_far_from_the_true_max(scale, causal, small_tiles):
    # Unmasked tiles subtract the Cauchy-Schwarz bound |q||k| instead of the row max. Queries
    # and keys in orthogonal halves of the head dim keep every score near 0 while the bound grows
    # with `scale`; at 60 the row sums underflow and those tiles are redone with the exact max.
    q, k, v = loose_shift_inputs(scale)
    ref = attention(q, k, v, causal=causal, backend="reference", return_lse=True)
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        out = attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal, backend="tiled",
                        return_lse=True)
        assert torch.allclose(out.out.double(), ref.out, atol=tol, rtol=tol)
        assert torch.allclose(out.lse.double(), ref.lse, atol=tol * 100, rtol=tol)


@pytest.mark.parametrize("mask_name", ["none", "causal", "float", "key_padding"])
@pytest.mark.parametrize("backend", ["sdpa", "tiled"])
def test_float16(backend, mask_name, small_tiles):
    batch, n_q, n_k, d_k, d_v = SMALL_SHAPES[2]
    q, k, v = _inputs(batch, n_q, n_k, d_k, d_v)
    assert_backend_matches(q, k, v, backend, torch.float16,
                           **_kwargs(mask_name, batch, n_q, n_k, torch.float16))
