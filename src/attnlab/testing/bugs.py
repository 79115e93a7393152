"""The bugs people write in their own attention, each one line away from a correct one.

Every entry of :data:`BUGS` is an implementation ``fn(q, k, v, **options)`` with one planted
bug, the features to declare to :func:`~attnlab.testing.check_attention`, the case that must
fail and words its detail must contain. They are what the kit is tested against
(``tests/testing/test_kit.py``), what ``benchmarks/bench_kit.py`` tabulates in
docs/efficient.md, and the exercises of docs/tutorials: write the fix, run the kit.

    from attnlab.testing import check_attention
    from attnlab.testing.bugs import BUGS
    bug = BUGS["finfo.min causal mask"]
    print(check_attention(bug.fn, supports=bug.supports))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Bug:
    """A planted bug: the implementation, what it declares, the case that catches it."""
    fn: Callable
    supports: tuple[str, ...]
    case: str                           # the failing case's name starts with this
    words: str                          # ... and its detail contains these
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    what: str = ""


def _ref(q, k, v, **o):
    from attnlab.core.api import attention
    return attention(q, k, v, backend="reference", **o)


def _scores(q, k, scale=None):
    return q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)


def _causal_keep(n_q, n_k, offset):
    return torch.ones(n_q, n_k, dtype=torch.bool).tril(offset)


def no_default_scale(q, k, v, **o):
    """Forgets 1/sqrt(d_k) when no scale is given."""
    return _ref(q, k, v, **{**o, "scale": o.get("scale", 1.0)})


def top_left_causal(q, k, v, causal=False, **o):
    """Causal mask aligned top-left (``tril()``), not bottom-right, when N_q != N_k."""
    if causal:
        o["mask"] = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return _ref(q, k, v, **o)


def clamped_causal_offset(q, k, v, causal=False, **o):
    """The bottom-right offset N_k - N_q clamped at 0: top-left once N_q > N_k."""
    if causal:
        offset = max(k.shape[-2] - q.shape[-2], 0)
        o["mask"] = _causal_keep(q.shape[-2], k.shape[-2], offset)
    return _ref(q, k, v, **o)


def finfo_min_causal(q, k, v, causal=False, **o):
    """Masks with ``finfo.min`` instead of -inf: a query that sees no key averages every
    value instead of giving 0."""
    s = _scores(q, k)
    if causal:
        keep = _causal_keep(q.shape[-2], k.shape[-2], k.shape[-2] - q.shape[-2])
        s = s.masked_fill(~keep, torch.finfo(s.dtype).min)
    return torch.softmax(s, -1) @ v


def nan_on_masked_rows(q, k, v, mask=None, **o):
    """softmax of a row of -inf: NaN where a query may attend nothing."""
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


def mask_of_the_first_tile(q, k, v, mask=None, **o):
    """Tiles of 64 keys that all reuse the first tile's mask columns."""
    if mask is not None and mask.dtype == torch.bool and mask.shape[-1] > 64:
        first = mask[..., :64]
        mask = first.repeat(*([1] * (mask.dim() - 1)), math.ceil(mask.shape[-1] / 64))
        mask = mask[..., :k.shape[-2]]
    return _ref(q, k, v, mask=mask, **o)


class _TenPercentDq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
        with torch.enable_grad():
            out = _ref(q_, k_, v_)
        ctx.save_for_backward(q_, k_, v_, out)
        return out.detach()

    @staticmethod
    def backward(ctx, g):
        q_, k_, v_, out = ctx.saved_tensors
        dq, dk, dv = torch.autograd.grad(out, (q_, k_, v_), g)
        return 1.1 * dq, dk, dv


def wrong_gradient(q, k, v, **o):
    """A hand-written backward whose dq is 10% too large."""
    if o:
        return _ref(q, k, v, **o)
    return _TenPercentDq.apply(q, k, v)


def _keep(shape, p, generator, device):
    return torch.rand(shape, generator=generator).to(device) >= p


def dropout_ignores_generator(q, k, v, dropout_p=0.0, generator=None, **o):
    """Dropout from the global random state, not the generator passed."""
    w = torch.softmax(_scores(q, k), -1)
    return torch.nn.functional.dropout(w, dropout_p) @ v


def dropout_without_rescale(q, k, v, dropout_p=0.0, generator=None, **o):
    """Drops weights but forgets to divide the kept ones by 1 - p."""
    w = torch.softmax(_scores(q, k), -1)
    if dropout_p:
        w = w * _keep(w.shape, dropout_p, generator, w.device)
    return w @ v


def dropout_keeps_p(q, k, v, dropout_p=0.0, generator=None, **o):
    """Keeps each weight with probability p instead of 1 - p."""
    w = torch.softmax(_scores(q, k), -1)
    if dropout_p:
        keep = (torch.rand(w.shape, generator=generator) < dropout_p).to(w.device)
        w = w * keep / (1 - dropout_p)
    return w @ v


def dropout_on_the_scores(q, k, v, dropout_p=0.0, generator=None, **o):
    """Drops scores before the softmax instead of weights after it."""
    s = _scores(q, k)
    if dropout_p:
        s = s * _keep(s.shape, dropout_p, generator, s.device) / (1 - dropout_p)
    return torch.softmax(s, -1) @ v


def bfloat16_ten_percent_high(q, k, v, **o):
    """A bfloat16 path whose output is 10% too large (within the output's own size)."""
    out = _ref(q, k, v, **o)
    return out * 1.1 if q.dtype == torch.bfloat16 else out


BUGS: dict[str, Bug] = {
    "forgotten 1/sqrt(d_k)": Bug(no_default_scale, (), "plain", "error",
                                 what="no scale when none is given"),
    "top-left causal mask": Bug(top_left_causal, ("causal",),
                                "causal (bottom-right), N_q < N_k", "error"),
    "causal offset clamped at 0": Bug(clamped_causal_offset, ("causal",),
                                      "causal (bottom-right), N_q > N_k", "error"),
    "finfo.min causal mask": Bug(finfo_min_causal, ("causal",),
                                 "causal (bottom-right), N_q > N_k", "error"),
    "NaN on a fully masked row": Bug(nan_on_masked_rows, ("mask",), "fully masked rows", "NaN"),
    "mask of the first tile reused": Bug(mask_of_the_first_tile, ("mask",),
                                         "bool mask (B, 1, N_q, N_k)", "error"),
    "dq 10% off": Bug(wrong_gradient, (), "plain", "dq error"),
    "dropout from the global RNG": Bug(dropout_ignores_generator, ("dropout",),
                                       "dropout follows its generator", "generator"),
    "dropout without 1/(1 - p)": Bug(dropout_without_rescale, ("dropout",),
                                     "dropout keeps 1 - p", "1/(1 - p)"),
    "dropout keeps p, not 1 - p": Bug(dropout_keeps_p, ("dropout",), "dropout keeps 1 - p",
                                      "instead of 1 - p"),
    "dropout before the softmax": Bug(dropout_on_the_scores, ("dropout",),
                                      "dropout keeps 1 - p", "not the scores before it"),
    "bfloat16 output 10% high": Bug(bfloat16_ten_percent_high, (), "plain", "out error",
                                    dtypes=(torch.bfloat16,)),
}


# Correct, but not written like attnlab's: the kit must pass them.


def float64_logsumexp(q, k, v, causal=False, **o):
    """Scores and their log-sum-exp in float64, the weights cast back once."""
    s = _scores(q.double(), k.double())
    if causal:
        keep = _causal_keep(q.shape[-2], k.shape[-2], k.shape[-2] - q.shape[-2])
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    w = torch.where(torch.isneginf(lse), 0.0, torch.exp(s - lse))
    return (w.to(q.dtype) @ v), lse.squeeze(-1).to(torch.float32 if q.dtype != torch.float64
                                                    else torch.float64)


def chunked_over_keys(q, k, v, causal=False, dropout_p=0.0, generator=None, **o):
    """An online softmax over chunks of 7 keys, in float32 for half inputs, with its own
    dropout mask per chunk."""
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qf, kf, vf = q.to(work), k.to(work), v.to(work)
    n_q, n_k = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=work)
    denom = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=work)
    for j in range(0, n_k, 7):
        s = _scores(qf, kf[..., j:j + 7, :])
        if causal:
            cols = torch.arange(j, min(j + 7, n_k))
            rows = torch.arange(n_q)[:, None] + (n_k - n_q)
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        p = torch.exp(s - safe)
        fix = torch.exp(torch.where(torch.isneginf(m), float("-inf"), m - safe))
        denom = denom * fix + p.sum(-1, keepdim=True)
        if dropout_p:
            p = p * (torch.rand(p.shape, generator=generator) >= dropout_p) / (1 - dropout_p)
        acc = acc * fix + p @ vf[..., j:j + 7, :]
        m = m_new
    out = torch.where(denom > 0, acc / torch.where(denom > 0, denom, 1.0), 0.0)
    return out.to(q.dtype)


CORRECT: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "float64 log-sum-exp, cast once": (float64_logsumexp, ("causal", "lse")),
    "chunked over keys, own dropout masks": (chunked_over_keys, ("causal", "dropout")),
}
