"""Float masks that require grad (T5's learned position bias, ALiBi slopes as a bias tensor)
get the formula's gradient on every backend that takes them, and rows where every score
carries a huge additive mask (left padding) get the formula's gradient too."""

import pytest
import torch

from attnlab import attention
from attnlab.core.backends import tiled
from tests.helpers import max_err, run

BACKENDS = ["reference", "sdpa", "tiled"]


@pytest.mark.parametrize("shape", [(5, 7), (1, 3, 5, 7), (2, 1, 1, 7), (2, 3, 5, 1)], ids=str)
@pytest.mark.parametrize("n_tiles", [1, 4])
def test_tiled_float_mask_gradient_is_the_reference_one(shape, n_tiles):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64, requires_grad=True)
               for n in (5, 7, 7))
    bias = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
    grads = {}
    for backend in ("reference", "tiled"):
        with tiled.tile_sizes(2, 3) if n_tiles > 1 else tiled.tile_sizes(512, 1024):
            out = attention(q, k, v, mask=bias, backend=backend, causal=True)
        cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                          dtype=torch.float64)
        grads[backend] = torch.autograd.grad((out * cot).sum(), (q, k, v, bias))
    for a, b in zip(grads["tiled"], grads["reference"]):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_tiled_float_mask_gradcheck():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64, requires_grad=True)
               for n in (3, 5, 5))
    bias = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    with tiled.tile_sizes(2, 2):
        assert torch.autograd.gradcheck(
            lambda a, b, c, m: attention(a, b, c, mask=m, backend="tiled", return_lse=True).lse
            + attention(a, b, c, mask=m, backend="tiled").sum(-1), (q, k, v, bias))


@pytest.mark.parametrize("huge", ["finfo.min", -1e9, float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [5, 37])
def test_rows_under_a_huge_additive_mask_get_the_formulas_gradient(huge, dtype, backend, n):
    # Left padding with a label shift: the first queries of sequence 0 see only padded keys,
    # so every score of their rows carries the huge mask. The formula is the softmax of
    # q k^T plus a constant per row there: the float64 reference on the mask with each row's
    # largest entry subtracted (exact), against which each backend may err at most 3x what the
    # plain reference errs in the same precision (which rounds q k^T away under finfo.min).
    # Scores are small, so those rows are nearly uniform and a backward that recomputes
    # P = exp(S - lse) with lse = m + log l rounded to m (P = 1 instead of 1/N) is far off.
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64) * 0.3 for _ in range(2))
    v = torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64)
    value = torch.finfo(dtype).min if huge == "finfo.min" else huge
    mask = torch.zeros(2, 1, n, n, dtype=torch.float64)
    mask[0, :, :, :3] = value                    # sequence 0: three padded keys ...
    mask[0, :, :3, :] = value                    # ... and its first three queries see nothing else
    mask = mask + torch.triu(torch.full((n, n), value, dtype=torch.float64), 1)
    if huge != float("-inf"):
        mask = mask.clamp(min=torch.finfo(dtype).min)
    top = mask.amax(-1, keepdim=True)
    exact = mask - torch.where(torch.isneginf(top), 0.0, top)
    with tiled.tile_sizes(4, 8):
        gold = run(q, k, v, "reference", mask=exact, want_lse=False)
        low = [t.to(dtype) for t in (q, k, v)]
        plain = run(*low, "reference", mask=mask.to(dtype), want_lse=False)
        got = run(*low, backend, mask=mask.to(dtype), want_lse=False)
    floor = 8 * torch.finfo(dtype).eps * n ** 0.5
    for name, g_, p_, o_ in zip(("out", "dq", "dk", "dv"), (gold[0], *gold[2]),
                                (plain[0], *plain[2]), (got[0], *got[2])):
        assert torch.isfinite(o_).all(), name
        bound = 3 * max_err(p_, g_) + floor * max(float(g_.abs().max()), 1.0)
        assert max_err(o_, g_) <= bound, (name, max_err(o_, g_), bound)


def _eager(q, k, v, mask, scale):
    """transformers' eager attention, verbatim in arithmetic: S + m in the input dtype, the
    softmax in float32, cast back, times V."""
    s = (q @ k.transpose(-2, -1)) * scale + mask
    return torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v


# float64's minimum plus any negative score overflows to -inf, so eager gives NaN on such rows
# in float64; attnlab gives them defined values (the fully-masked-row tests cover that).
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [6, 70])
def test_rows_under_the_dtypes_minimum_get_eagers_answer(dtype, backend, n):
    # Left padding as transformers builds it: finfo(dtype).min on padded keys and on every key
    # of the padded queries, plus causal. Those rows are eager's mask softmax (uniform), on
    # every backend that takes float masks, forward and backward; the other rows are ordinary.
    # n = 70 crosses the tiles set below.
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(3, 2, n, 16, generator=g).to(dtype) for _ in range(3))
    low = torch.finfo(dtype).min
    mask = torch.triu(torch.full((n, n), low, dtype=dtype), 1).expand(3, 1, n, n).clone()
    mask[0, :, :, :4] = low                       # sequence 0: four padded keys,
    mask[0, :, :4, :] = low                       # and its first four queries see nothing else
    mask[1, :, :, :1] = low
    cot = torch.randn(3, 2, n, 16, generator=g).to(dtype)
    grads = {}
    for name, fn in (("eager", lambda a, b, c: _eager(a, b, c, mask, 0.25)),
                     (backend, lambda a, b, c: attention(a, b, c, mask=mask, scale=0.25,
                                                         backend=backend))):
        ts = [t.clone().requires_grad_() for t in (q, k, v)]
        with tiled.tile_sizes(16, 32):
            out = fn(*ts)
        grads[name] = (out.detach(), *torch.autograd.grad((out * cot).sum(), ts))
    eps = torch.finfo(dtype).eps
    for what, a, b in zip(("out", "dq", "dk", "dv"), grads[backend], grads["eager"]):
        tol = 4 * eps * n ** 0.5 * max(float(b.abs().max()), 1.0)
        assert max_err(a, b) <= tol, (what, max_err(a, b), tol)
    # every key of those rows carries the minimum: the mean of all values, not 0
    uniform = v[0].double().mean(-2, keepdim=True).expand(-1, 4, -1)
    assert max_err(grads[backend][0][0, :, :4], uniform) <= 4 * eps * n ** 0.5
