"""Chapter 13's checks: the pairs a window keeps, kernel attention in linear memory (every
tensor the reader's code creates is watched), and a window's keep-mask."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnlab.testing.exercises._verdict import Verdict, dtype_name, tolerance


def _kept_pairs(fn: Callable) -> Verdict:
    """``fn(N, w)``: pairs with |i - j| <= w among N tokens."""
    for n, w in ((10, 2), (100, 16), (7, 0), (5, 9), (4096, 128)):
        i = torch.arange(n)
        want = int(((i[:, None] - i[None, :]).abs() <= w).sum())
        got = fn(n, w)
        if got != want:
            return Verdict("13.1", False, f"N = {n}, w = {w} keeps {want:,} pairs, you said "
                           f"{got:,}" + (" (that counts 2w + 1 keys for every query, the first "
                                         "and last w included)" if got == n * (2 * w + 1)
                                         else ""))
    return Verdict("13.1", True, "five lengths and windows, a window wider than N included")


class _Largest(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation creates
    (``largest``) and the longest last dimension of any score a product, an exponential or a
    softmax computes (``widest``: ``q_i @ k.T`` for one query over every key is 96 wide),
    which bounds how many keys' scores one query holds at once."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.widest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        seen = {a.untyped_storage().data_ptr() for a in _tensors(args, kwargs)}
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                if (t.dim() and t.untyped_storage().data_ptr() not in seen
                        and func.overloadpacket in _SCORES):
                    self.widest = max(self.widest, t.shape[-1])
        return out


_SCORES = {torch.ops.aten.mm, torch.ops.aten.bmm, torch.ops.aten.mv, torch.ops.aten.addmm,
           torch.ops.aten.baddbmm, torch.ops.aten.exp, torch.ops.aten._softmax,
           torch.ops.aten._log_softmax, torch.ops.aten.softmax, torch.ops.aten.log_softmax}


def _tensors(args, kwargs):
    for a in (*args, *(kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from (x for x in a if isinstance(x, torch.Tensor))


def _kernel_attention(fn: Callable) -> Verdict:
    """``fn(phi_q (N, m), phi_k (N, m), v (N, D)) -> (N, D)``, without an N x N tensor."""
    g = torch.Generator().manual_seed(15)
    n, m, d = 300, 8, 4
    phi_q = torch.rand(n, m, generator=g, dtype=torch.float64) + 0.1
    phi_k = torch.rand(n, m, generator=g, dtype=torch.float64) + 0.1
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    a = phi_q @ phi_k.T
    want = (a @ v) / a.sum(-1, keepdim=True)
    with _Largest() as watch:
        got = fn(phi_q, phi_k, v)
    got = torch.as_tensor(got)
    if tuple(got.shape) != (n, d):
        return Verdict("13.2", False, f"expected ({n}, {d}), got {tuple(got.shape)}")
    err = float((got.double() - want).abs().max())
    if err > tolerance(got):
        return Verdict("13.2", False, f"the output differs from the normalised kernel "
                       f"average by up to {err:.3g} ({dtype_name(got)}, N = {n}, m = {m})")
    if watch.largest >= n * n:
        return Verdict("13.2", False, f"right output, but your code created a tensor of "
                       f"{watch.largest:,} elements for N = {n} (N x N = {n * n:,})")
    return Verdict("13.2", True, f"largest tensor {watch.largest:,} elements for N = {n}")


def _window_mask(fn: Callable) -> Verdict:
    """``fn(n, w) -> (n, n)`` bool, True where |i - j| <= w."""
    for n, w in ((9, 2), (6, 0), (5, 7)):
        i = torch.arange(n)
        want = (i[:, None] - i[None, :]).abs() <= w
        got = torch.as_tensor(fn(n, w))
        if tuple(got.shape) != (n, n) or not torch.equal(got.bool(), want):
            mid = n // 2
            return Verdict("13.3", False, f"n = {n}, w = {w}: query {mid} should keep "
                           f"{int(want[mid].sum())} keys, your mask keeps "
                           f"{int(got.bool()[mid].sum()) if got.shape == want.shape else '?'}")
    return Verdict("13.3", True, "three windows")


CHECKS = {"13.1": _kept_pairs, "13.2": _kernel_attention, "13.3": _window_mask}
