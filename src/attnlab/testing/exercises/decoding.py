"""Chapter 8's checks: the KV cache, MQA and GQA."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict


def _cache_bytes(fn: Callable) -> Verdict:
    cases = [dict(layers=32, kv_heads=8, head_dim=128, tokens=4096, batch=1, bytes_per=2),
             dict(layers=2, kv_heads=1, head_dim=64, tokens=100, batch=3, bytes_per=4),
             dict(layers=12, kv_heads=12, head_dim=64, tokens=1024, batch=8, bytes_per=2)]
    for c in cases:
        want = 2 * c["layers"] * c["kv_heads"] * c["head_dim"] * c["tokens"] * c["batch"] * \
            c["bytes_per"]
        got = fn(**c)
        if got != want:
            hint = " (keys and values: two tensors)" if got * 2 == want else ""
            return Verdict("8.1", False, f"for {c} the cache holds {want:,} bytes, you said "
                           f"{got:,}{hint}")
    return Verdict("8.1", True, "three configurations")


def _cached_step(fn: Callable) -> Verdict:
    """``fn(q_new, k_cache, v_cache, k_new, v_new) -> (out, k_cache, v_cache)``: one decoding
    step of causal attention with a cache; checked against full causal attention."""
    g = torch.Generator().manual_seed(9)
    b, h, d, n = 2, 3, 8, 7
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    full = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")), dim=-1) @ v
    kc, vc = k[:, :, :0], v[:, :, :0]
    for t in range(n):
        out, kc, vc = (torch.as_tensor(x) for x in fn(q[:, :, t:t + 1], kc, vc,
                                                       k[:, :, t:t + 1], v[:, :, t:t + 1]))
        if kc.shape[2] != t + 1:
            return Verdict("8.2", False, f"after step {t} the cache should hold {t + 1} "
                           f"positions, it holds {kc.shape[2]}")
        err = float((out - full[:, :, t:t + 1]).abs().max())
        if err > 1e-10:
            return Verdict("8.2", False, f"step {t}'s output differs from full causal attention "
                           f"by {err:.3g}")
    return Verdict("8.2", True, f"{n} steps equal full causal attention")


def _gqa_share(fn: Callable) -> Verdict:
    """``fn(k, n_heads) -> (B, n_heads, N, D)``: K/V of ``H_kv`` heads repeated so that query head
    ``h`` uses K/V head ``h // (n_heads // H_kv)``."""
    k = torch.arange(2 * 2 * 3 * 1, dtype=torch.float64).reshape(2, 2, 3, 1)
    got = torch.as_tensor(fn(k, 6))
    want = k.repeat_interleave(3, dim=1)
    if tuple(got.shape) != tuple(want.shape):
        return Verdict("8.3", False, f"expected shape {tuple(want.shape)}, got {tuple(got.shape)}")
    if not torch.equal(got.double(), want):
        heads = [int(got[0, h, 0, 0]) // 3 for h in range(6)]
        return Verdict("8.3", False, f"with 6 query heads over 2 K/V heads, query heads 0-5 "
                       f"read K/V heads {heads}; the grouping reads [0, 0, 0, 1, 1, 1]")
    return Verdict("8.3", True, "6 query heads over 2 K/V heads")


CHECKS = {"8.1": _cache_bytes, "8.2": _cached_step, "8.3": _gqa_share}
