"""The conformance cases of :func:`attnlab.testing.check_attention`.

A case is a name, the feature it needs (``None`` for every variant), a shape and a builder
``(shape, generator) -> (q, k, v, options)``: the same builder rebuilt on smaller shapes gives
the smallest failing input. Shapes are ``(B, H, N_q, N_k, D)``; the default ones cross the tile
sizes of the usual kernels (64 and 128) and use distinct sizes so that a swapped axis fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

Shape = tuple[int, int, int, int, int]
FEATURES = ("causal", "window", "mask", "float_mask", "dropout", "lse", "gqa", "softcap",
            "sinks", "scale")

# Smaller shapes tried, smallest first, when a case fails.
SHRINK: tuple[Shape, ...] = ((1, 1, 1, 1, 4), (1, 1, 2, 3, 4), (1, 2, 3, 5, 4), (2, 2, 5, 7, 8),
                             (1, 2, 17, 23, 8), (2, 3, 65, 70, 16), (1, 2, 129, 140, 16))


@dataclass(frozen=True)
class Case:
    """A conformance case: its name, the feature it needs, its shape and input builder."""
    name: str
    needs: str | None
    shape: Shape
    build: Callable[[Shape, torch.Generator], tuple]
    grad: bool = True
    rule: str = ""          # the convention the case checks, said when a gradient fails it


def _qkv(shape, g, kv_heads=None, scale=1.0):
    b, h, nq, nk, d = shape
    hk = h if kv_heads is None else kv_heads
    q = torch.randn(b, h, nq, d, generator=g, dtype=torch.float64) * scale
    k = torch.randn(b, hk, nk, d, generator=g, dtype=torch.float64) * scale
    v = torch.randn(b, hk, nk, d + 3, generator=g, dtype=torch.float64)   # D_v != D_k
    return q, k, v


def plain(shape, g):
    """q, k, v with no option."""
    return (*_qkv(shape, g), {})


def scaled(shape, g):
    """q, k, v with ``scale=0.37``."""
    return (*_qkv(shape, g), {"scale": 0.37})


def large_logits(shape, g):
    """q and k scaled by 12: scores far from zero, where a softmax without its max shift
    overflows."""
    return (*_qkv(shape, g, scale=12.0), {})


def causal(shape, g):
    """q, k, v with ``causal=True`` (bottom-right aligned)."""
    return (*_qkv(shape, g), {"causal": True})


def window(shape, g):
    """q, k, v with ``window=(3, 1)``."""
    return (*_qkv(shape, g), {"window": (3, 1)})


def _bool(shape, g, pattern):
    b, h, nq, nk, _ = shape
    dims = {"(N_q, N_k)": (nq, nk), "(B, 1, N_q, N_k)": (b, 1, nq, nk),
            "(1, H, 1, N_k)": (1, h, 1, nk), "(B, 1, 1, N_k)": (b, 1, 1, nk),
            "(B, H, N_q, 1)": (b, h, nq, 1)}[pattern]
    m = torch.rand(dims, generator=g) > 0.3
    if pattern != "(B, H, N_q, 1)":
        m[..., 0] = True                      # no fully masked row (that case is separate)
    return m


def bool_mask(pattern):
    """A builder of a random bool mask broadcast as ``pattern`` (True = may attend)."""
    def build(shape, g):
        return (*_qkv(shape, g), {"mask": _bool(shape, g, pattern)})
    build.__name__ = f"bool_mask{pattern}"
    return build


def float_mask(shape, g):
    """A random additive mask with ``-inf`` on the second half of the keys."""
    b, h, nq, nk, _ = shape
    m = torch.randn(1, h, nq, nk, generator=g, dtype=torch.float64)
    m[..., nk // 2:] = float("-inf") if nk > 1 else 0.0
    return (*_qkv(shape, g), {"mask": m})


def padding_rows(shape, g):
    """A float mask of -1e38 (the magnitude of float32's and bfloat16's minimum, as
    transformers' padding mask carries it) on the first keys of sequence 0, and on every key
    of its first queries: those rows are decided by the dtype's arithmetic, which rounds
    ``S + m`` to ``m``, and the formula gives them a uniform average (not 0, not the softmax
    of the raw scores).

    Gradients on those rows follow one rule, :data:`ABSORBED_RULE`: the gradient of the lse is
    the softmax weights the output used, ``d lse / d S = A``, whose rows sum to 1 (as
    ``lse(S + c) = lse(S) + c`` requires whatever c is); the output's is autograd's through
    those weights. Written as ``m + log sum exp(S - m)`` with the max ``m`` detached (the
    reference, every backend), a float64 variant follows it. ``torch.logsumexp``'s backward,
    ``exp(S - lse)``, does not on these rows: the lse rounds to ``m`` too, so every key gets
    1 and a row's gradient sums to N_k."""
    b, h, nq, nk, _ = shape
    m = torch.zeros(b, 1, nq, nk, dtype=torch.float64)
    m[0, :, :, : max(nk // 4, 1)] = -1e38
    m[0, :, : max(nq // 4, 1), :] = -1e38
    return (*_qkv(shape, g), {"mask": m})


ABSORBED_RULE = ("on rows the dtype's arithmetic absorbs, the kit's rule is d lse / d S = A, "
                 "the weights the output used, each row summing to 1; torch.logsumexp's "
                 "backward gives exp(S - lse) = 1 on every key there")


def masked_rows(shape, g):
    """Every other query may attend nothing: output 0, no NaN, zero gradients."""
    b, h, nq, nk, _ = shape
    m = torch.ones(b, 1, nq, nk, dtype=torch.bool)
    m[:, :, ::2] = False
    return (*_qkv(shape, g), {"mask": m})


def gqa(shape, g):
    """Grouped-query K/V: twice as many query heads as K/V heads."""
    b, h, nq, nk, d = shape
    return (*_qkv((b, 2 * h, nq, nk, d), g, kv_heads=h), {"enable_gqa": True})


def softcap(shape, g):
    """Large scores capped with ``softcap=5``."""
    return (*_qkv(shape, g, scale=4.0), {"softcap": 5.0})


def sinks(shape, g):
    """One sink logit per head."""
    q, k, v = _qkv(shape, g)
    return q, k, v, {"sinks": torch.randn(shape[1], generator=g, dtype=torch.float64)}


def cases(supports: frozenset[str], quick: bool = True) -> list[Case]:
    """Every case the declared features allow."""
    big = (2, 3, 129, 140, 40)                # crosses 64 and 128 on both axes
    odd = (1, 2, 17, 23, 59)                  # N_q != N_k, an odd head dim
    out = [Case("plain", None, odd, plain), Case("plain, long", None, big, plain),
           Case("one query, one key", None, (1, 1, 1, 1, 8), plain),
           Case("N_q > N_k", None, (1, 2, 37, 5, 16), plain),
           Case("large logits", None, odd, large_logits)]
    if "scale" in supports:
        out.append(Case("scale=0.37", "scale", odd, scaled))
    if "causal" in supports:
        # N_q > N_k: bottom-right alignment leaves the first N_q - N_k queries no key at all
        # (their output is 0); an offset clamped at 0 (top-left) or a finfo.min mask (which
        # averages every value on such rows) fails here
        out += [Case("causal (bottom-right), N_q < N_k", "causal", (1, 2, 9, 30, 16), causal),
                Case("causal (bottom-right), N_q > N_k", "causal", (1, 2, 30, 9, 16), causal),
                Case("causal, long", "causal", big, causal)]
    if "window" in supports:
        out += [Case("window (3, 1)", "window", (1, 2, 70, 90, 16), window),
                Case("window (3, 1), N_q > N_k", "window", (1, 2, 40, 13, 16), window)]
    if "mask" in supports:
        for p in ("(N_q, N_k)", "(B, 1, N_q, N_k)", "(1, H, 1, N_k)", "(B, 1, 1, N_k)",
                  "(B, H, N_q, 1)"):
            out.append(Case(f"bool mask {p}", "mask", big, bool_mask(p)))
        out.append(Case("fully masked rows", "mask", odd, masked_rows))
    if "float_mask" in supports:
        out += [Case("float mask with -inf", "float_mask", odd, float_mask),
                Case("rows under a -1e38 float mask (padding)", "float_mask", big,
                     padding_rows, rule=ABSORBED_RULE)]
    if "gqa" in supports:
        out.append(Case("grouped-query K/V", "gqa", (1, 2, 19, 33, 16), gqa))
    if "softcap" in supports:
        out.append(Case("softcap 5", "softcap", odd, softcap))
    if "sinks" in supports:
        out.append(Case("sinks", "sinks", odd, sinks))
    return out
