"""One attention call step by step on real numbers, checked against the code.

:func:`walk` computes Q K^T -> scaled and masked scores -> softmax -> A V in float64, checks
the invariants, and runs every exact backend on the same numbers. Numbers and checks only:
``attnlab explain`` (:mod:`attnlab.cli.explain`) prints them and
:func:`attnlab.plots.explain.save_heatmaps` draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnlab.core import attention, list_backends, masks

BUILTIN_TOKENS = ["The", "cat", "sat", "on", "the", "mat"]
MAX_TOKENS = 64          # every matrix is printed in full


@dataclass
class Check:
    """One check of a walk: its name, whether it passed, and the measured detail."""
    name: str
    passed: bool
    detail: str


@dataclass
class Walkthrough:
    """All intermediate matrices of one attention call, float64, shapes (N_q, ...)."""

    tokens: list[str]
    q: torch.Tensor            # (N, D)
    k: torch.Tensor            # (N, D)
    v: torch.Tensor            # (N, D)
    scale: float
    temperature: float
    causal: bool
    window: tuple[int | None, int | None] | None
    keep: torch.Tensor         # (N, N) bool, True = may attend
    s: torch.Tensor            # (N, N) Q K^T
    scaled: torch.Tensor       # (N, N) S * scale / temperature, -inf where masked
    a: torch.Tensor            # (N, N) softmax rows
    o: torch.Tensor            # (N, D) A V
    checks: list[Check] = field(default_factory=list)
    backends: dict[str, str] = field(default_factory=dict)   # backends not compared, and why
    source: str = "built-in example"                          # where Q, K, V come from
    label: str = ""                                           # short form for figure titles

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(c.passed for c in self.checks)


def example(n: int | None = None, d: int | None = None, seed: int | None = None):
    """Tokens and Q, K, V (float64, rounded to one decimal so they can be followed by hand).

    With no arguments: the built-in six-token sentence with D = 4.
    """
    if n is None and d is None and seed is None:
        tokens = list(BUILTIN_TOKENS)
        n, d, seed = len(tokens), 4, 7
    else:
        n = 6 if n is None else n
        d = 4 if d is None else d
        seed = 0 if seed is None else seed
        tokens = [f"t{i}" for i in range(n)]
    g = torch.Generator().manual_seed(seed)
    # + 0.0 turns the -0.0 of rounding into 0.0 so it prints as 0.000
    q, k, v = (torch.round(torch.randn(n, d, generator=g, dtype=torch.float64) * 10) / 10 + 0.0
               for _ in range(3))
    return tokens, q, k, v


def walk(tokens: list[str], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
         causal: bool = False, window: int | tuple[int | None, int | None] | None = None,
         temperature: float = 1.0, tol: float = 1e-12) -> Walkthrough:
    """Compute each step by the formula and check it against the library."""
    n_q, n_k, d = q.shape[0], k.shape[0], q.shape[1]
    # Validate through the core first, so bad options get the core's messages.
    attention(q, k, v, causal=causal, window=window, temperature=temperature, backend="reference")
    scale = 1.0 / math.sqrt(d)
    w = (window, window) if isinstance(window, int) else window
    fns = []
    if causal:
        fns.append(masks.causal(offset=n_k - n_q))
    if w is not None:
        fns.append(masks.window(w[0], w[1], offset=n_k - n_q))
    keep = (masks.materialize(masks.and_masks(*fns), n_q, n_k)[0, 0] if fns
            else torch.ones(n_q, n_k, dtype=torch.bool))

    s = q @ k.T                                                  # (N_q, N_k)
    scaled = (s * scale / temperature).masked_fill(~keep, float("-inf"))
    a = torch.zeros_like(scaled)
    for i in range(n_q):                                         # softmax, one row at a time
        if keep[i].any():
            e = torch.exp(scaled[i] - scaled[i].max())
            a[i] = e / e.sum()
    o = a @ v                                                    # (N_q, D_v)

    wt = Walkthrough(tokens, q, k, v, scale, temperature, causal, w, keep, s, scaled, a, o)
    empty = ~keep.any(-1)
    row_sums = a.sum(-1)
    wt.checks.append(Check("A >= 0", bool((a >= 0).all()), f"min {float(a.min()):.3g}"))
    err_sum = float((row_sums[~empty] - 1).abs().max()) if (~empty).any() else 0.0
    wt.checks.append(Check("rows of A sum to 1", err_sum <= tol, f"max |sum - 1| = {err_sum:.2e}"))
    wt.checks.append(Check("A = 0 where masked", bool((a[~keep] == 0).all()),
                           f"{int((~keep).sum())} masked entries"))
    if empty.any():
        wt.checks.append(Check("fully masked rows give O = 0", bool((o[empty] == 0).all()),
                               f"{int(empty.sum())} rows"))
    ref = attention(q, k, v, causal=causal, window=window, temperature=temperature,
                    backend="reference", return_weights=True)
    err_a = float((ref.weights - a).abs().max())
    wt.checks.append(Check("formula = reference backend", err_a <= tol and
                           float((ref.out - o).abs().max()) <= tol, f"max |dA| = {err_a:.2e}"))

    for name, backend in list_backends().items():
        if not backend.capabilities.exact:
            wt.backends[name] = "approximate: not compared"
            continue
        try:
            out = attention(q, k, v, causal=causal, window=window, temperature=temperature,
                            backend=name)
        except ValueError as exc:
            wt.backends[name] = f"cannot serve: {exc}"
            continue
        err = float((out - o).abs().max())
        wt.checks.append(Check(f"backend {name} gives the same O", err <= tol,
                               f"max |O - O_formula| = {err:.2e}"))
    return wt


def unscaled_note(wt: Walkthrough) -> list[str]:
    """What the 1/sqrt(D_k) scale prevents, on this walk's own Q and K: the largest weight of
    each row and the rows' entropy with and without the scale."""
    keep = wt.keep
    lines = []
    for tag, c in (("with 1/sqrt(D_k)", wt.scale / wt.temperature),
                   ("without the scale", 1.0 / wt.temperature)):
        s = (wt.s * c).masked_fill(~keep, float("-inf"))
        live = keep.any(-1)
        a = torch.softmax(s[live], dim=-1)
        ent = -(a * torch.log(torch.where(a > 0, a, 1.0))).sum(-1)
        lines.append(f"{tag}: score std {float((wt.s * c)[keep].std()):.2f}, largest weight per "
                     f"row {float(a.amax(-1).mean()):.2f} on average, entropy "
                     f"{float(ent.mean()):.2f} nats (uniform: {math.log(keep.shape[1]):.2f})")
    return lines
