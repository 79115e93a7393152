"""Per-head attention metrics, with the published definitions.

All functions take the maps of one sequence, ``maps (L, H, n, n)`` (rows: queries, columns:
keys; each row sums to 1), and return ``(L, H)`` tensors unless stated.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

import torch

METRIC_TITLES = {
    "entropy_ratio": "entropy / ln n", "confidence": "confidence (mean max weight)",
    "prev": "previous-token mass", "next": "next-token mass", "self": "self mass",
    "cls": "[CLS] mass", "sep": "[SEP] mass", "punct": "'.' and ',' mass",
    "first": "first-token (sink) mass", "within_segment": "within-sentence mass",
    # causal models only (attnlab.inspect.heads, attnlab.inspect.ablation)
    "prefix_matching": "induction (prefix-matching) score",
    "duplicate": "duplicate-token score", "copying": "copying score (OV eigenvalues)",
    "ablation": "loss increase when zero-ablated",
}


def is_punctuation(token: str) -> bool:
    """Any punctuation token (for word-piece merging and display)."""
    t = token.removeprefix("##").removeprefix("▁").removeprefix("Ġ")
    return bool(t) and all(ch in string.punctuation for ch in t)


def is_period_or_comma(token: str) -> bool:
    """"." or "," -- the punctuation Clark et al. (2019, section 3) measure attention to."""
    return token.removeprefix("▁").removeprefix("Ġ") in (".", ",")


def entropy(maps: torch.Tensor, eps: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean entropy of the attention rows (nats) and its ratio to ln n, ``(L, H)`` each.

    Smoothed: each row is mixed with a uniform floor, ``(a + eps) / (1 + n eps)``, so that 0·log 0
    needs no special case (Clark et al. 2019, section 3 report the same per-head average
    entropy). The ratio is 1 for uniform attention and 0 for attention on a single key.
    """
    n = maps.shape[-1]
    h = torch.zeros(maps.shape[:2], dtype=torch.float64)
    for layer in range(maps.shape[0]):             # a layer at a time: no map-sized temporary
        p = (maps[layer] + eps) / (1 + n * eps)                       # (H, n_q, n)
        h[layer] = -torch.special.xlogy(p, p).sum(-1).double().mean(-1)
    return h, h / math.log(n) if n > 1 else torch.zeros_like(h)


def confidence(maps: torch.Tensor) -> torch.Tensor:
    """Mean over queries of the largest weight (Voita et al. 2019, section 4.1: "confident"
    heads put most of their mass on one token)."""
    return maps.amax(-1).mean(-1)


def offset_mass(maps: torch.Tensor, offset: int) -> torch.Tensor:
    """Mean weight on the key at ``query + offset``: -1 previous, +1 next, 0 self
    (Clark et al. 2019, section 4)."""
    diag = torch.diagonal(maps, offset=offset, dim1=-2, dim2=-1)     # (L, H, n - |offset|)
    return diag.mean(-1) if diag.shape[-1] else torch.zeros(maps.shape[:2], dtype=maps.dtype)


def offset_argmax(maps: torch.Tensor, offset: int | tuple[int, ...]) -> torch.Tensor:
    """Fraction of queries whose largest weight is on ``query + offset`` alone (Voita et al.
    2019 call a head positional when this is at least 90%). A query whose largest weight is
    shared by several keys (a 50/50 split between the previous and the next token) has no
    single argmax and counts for none of them, instead of for whichever comes first.

    A tuple of offsets gives one ``(L, H)`` result per offset, stacked, from one pass."""
    offsets = (offset,) if isinstance(offset, int) else tuple(offset)
    n = maps.shape[-1]
    top, best = maps.max(-1)                                         # (L, H, n) each
    unique = (maps == top[..., None]).sum(-1) == 1                   # one key holds the max
    out = []
    for o in offsets:
        target = torch.arange(n) + o
        valid = (target >= 0) & (target < n)
        if not valid.any():
            out.append(torch.zeros(maps.shape[:2], dtype=maps.dtype))
            continue
        hit = (best == target.clamp(0, n - 1)) & unique              # (L, H, n)
        out.append(hit[..., valid].to(maps.dtype).mean(-1))
    return out[0] if isinstance(offset, int) else torch.stack(out)


def token_mass(maps: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Mean over queries of the total weight on the keys where ``keys`` (bool, n) is True;
    a ``(k, n)`` stack of key sets gives ``(k, L, H)``."""
    keys = keys.to(maps.dtype)
    if keys.dim() == 1:
        return (maps @ keys).mean(-1)                                # one read, no product
    return (maps @ keys.T).mean(-2).movedim(-1, 0)                   # (L, H, n, k) -> (k, L, H)


@dataclass
class HeadMetrics:
    """Every metric, ``(L, H)`` tensors, for one sequence or averaged over a corpus."""

    entropy: torch.Tensor
    entropy_ratio: torch.Tensor
    confidence: torch.Tensor
    prev: torch.Tensor
    next: torch.Tensor
    self: torch.Tensor
    prev_argmax: torch.Tensor
    next_argmax: torch.Tensor
    self_argmax: torch.Tensor
    cls: torch.Tensor
    sep: torch.Tensor
    punct: torch.Tensor
    first: torch.Tensor
    within_segment: torch.Tensor | None = None
    # causal models: detector scores and zero-ablation importance, where measured
    prefix_matching: torch.Tensor | None = None
    duplicate: torch.Tensor | None = None
    copying: torch.Tensor | None = None
    ablation: torch.Tensor | None = None

    @classmethod
    def mean(cls, items: list["HeadMetrics"]) -> "HeadMetrics":
        """The metrics averaged over several inspections (texts)."""
        fields = items[0].__dict__.keys()
        merged = {}
        for f in fields:
            vals = [getattr(m, f) for m in items if getattr(m, f) is not None]
            merged[f] = torch.stack(vals).mean(0) if vals else None
        return cls(**merged)


def head_metrics(maps: torch.Tensor, tokens: list[str],
                 segments: torch.Tensor | None = None) -> HeadMetrics:
    """All metrics of one sequence. ``segments (n,)`` marks sentence A / B of a pair."""
    maps = maps.double()
    n = maps.shape[-1]
    if len(tokens) != n:
        raise ValueError(f"tokens has {len(tokens)} entries but the maps are {n} x {n}")
    ent, ratio = entropy(maps)
    is_cls = torch.tensor([t in ("[CLS]", "<s>", "<cls>") for t in tokens])
    is_sep = torch.tensor([t in ("[SEP]", "</s>", "<sep>") for t in tokens])
    is_punct = torch.tensor([is_period_or_comma(t) for t in tokens])       # as Clark et al.
    first = torch.zeros(n, dtype=torch.bool)
    first[0] = True
    within = None
    if segments is not None and segments.unique().numel() > 1:
        same = segments[:, None] == segments[None, :]                  # (n, n)
        within = (maps * same.to(maps.dtype)).sum(-1).mean(-1)
    prev_arg, next_arg, self_arg = offset_argmax(maps, (-1, 1, 0))
    cls_mass, sep_mass, punct_mass, first_mass = token_mass(
        maps, torch.stack([is_cls, is_sep, is_punct, first]))
    return HeadMetrics(
        entropy=ent, entropy_ratio=ratio, confidence=confidence(maps),
        prev=offset_mass(maps, -1), next=offset_mass(maps, 1), self=offset_mass(maps, 0),
        prev_argmax=prev_arg, next_argmax=next_arg, self_argmax=self_arg,
        cls=cls_mass, sep=sep_mass, punct=punct_mass, first=first_mass, within_segment=within)


def numba_installed() -> bool:
    """Whether the numba kernels of :mod:`attnlab.inspect._fast` can load."""
    from importlib.util import find_spec

    return find_spec("numba") is not None


JS_BUDGET = 1_000_000_000      # pair x row x key terms of js_distances before rows are sampled


def js_distances(maps: torch.Tensor, kernel: str | None = None) -> torch.Tensor:
    """Jensen-Shannon distance between every pair of heads, ``(L*H, L*H)``.

    For heads g and h, the JS divergence (base 2, in [0, 1]) between their attention rows,
    averaged over the queries, then its square root (a metric). Clark et al. (2019, section 6)
    compare heads the same way to show that heads in the same layer behave alike.

    ``kernel``: ``"torch"``, or ``"numba"`` (a fused loop; default above 64 tokens when numba
    is installed: 2.2 s instead of 3.9 s at 512 tokens). Up to 64 tokens torch in float64,
    longer texts in float32.

    The work is pairs x rows x n; past ``JS_BUDGET`` terms the average runs over evenly spaced
    query rows (at least 32) instead of all of them: every row still weighs alike, so the
    estimate is unbiased (a 12 x 12-head model at 1024 tokens: 94 rows). Up to 512 tokens of a
    6 x 12-head model every row is used.
    """
    n_rows = maps.shape[-2]
    pairs = maps.shape[0] * maps.shape[1]
    pairs = pairs * (pairs - 1) // 2
    keep = max(32, JS_BUDGET // max(pairs * maps.shape[-1], 1))
    if n_rows > keep:
        idx = torch.linspace(0, n_rows - 1, keep).round().long().unique()
        maps = maps[..., idx, :]
    n = maps.shape[-1]
    if kernel is None:
        kernel = "numba" if n > 64 and numba_installed() else "torch"
    if kernel not in ("torch", "numba"):
        raise ValueError(f"kernel must be 'torch' or 'numba', got {kernel!r}")
    if kernel == "numba":
        from attnlab.inspect._fast import js_sums

        rows = maps.float().flatten(0, 1).transpose(0, 1).numpy()      # (n_q, LH, n)
        out = torch.from_numpy(js_sums(rows, torch.get_num_threads())) / (
            maps.shape[-2] * math.log(2.0))                            # mean over queries
    else:
        out = _js_torch(maps)
    out = out + out.T
    return out.clamp_min(0).sqrt()


def _js_torch(maps: torch.Tensor) -> torch.Tensor:
    """The upper triangle of the JS divergences (bits) with torch."""
    # JS(P, Q) = H((P + Q) / 2) - (H(P) + H(Q)) / 2, each pair once (a third of the work of
    # the two KL terms over both triangles), a block of query rows at a time so that the
    # mixture stays in cache (twice as fast at 512 tokens as one pass).
    n, n_q = maps.shape[-1], maps.shape[-2]
    dtype = torch.float64 if n <= 64 else torch.float32
    p = maps.to(dtype).flatten(0, 1)                                  # (LH, n_q, n)
    heads = p.shape[0]
    xlogx = torch.special.xlogy(p, p).sum(-1)                         # -H(P) ln 2, (LH, n)
    out = torch.zeros(heads, heads, dtype=torch.float64)
    rows = 32
    buf = torch.empty(heads, rows, n, dtype=dtype)
    for g in range(heads - 1):
        acc = torch.zeros(heads - g - 1, dtype=torch.float64)
        for r in range(0, n_q, rows):
            m = buf[:heads - g - 1, :min(rows, n_q - r)]
            torch.add(p[g + 1:, r:r + rows], p[g, r:r + rows][None], out=m).mul_(0.5)
            mixed = torch.special.xlogy(m, m, out=m).sum(-1)          # -H(M) ln 2
            half = 0.5 * (xlogx[g, r:r + rows][None] + xlogx[g + 1:, r:r + rows])
            acc += (half - mixed).sum(-1).double()
        out[g, g + 1:] = acc / (n_q * math.log(2.0))                  # mean over queries, bits
    return out


def layer_distance_summary(dist: torch.Tensor, heads: int) -> dict[str, float]:
    """Mean JS distance between heads of the same layer and of different layers."""
    n = dist.shape[0]
    layer = torch.arange(n) // heads
    same = (layer[:, None] == layer[None, :]) & ~torch.eye(n, dtype=torch.bool)
    cross = layer[:, None] != layer[None, :]
    return {"same_layer": float(dist[same].mean()), "cross_layer": float(dist[cross].mean())}


def embed_2d(dist: torch.Tensor) -> torch.Tensor:
    """Classical (Torgerson) MDS of the head distances into the plane, ``(L*H, 2)``.

    The two leading eigenvectors of the double-centred squared distances
    ``B = -J D² J / 2`` (``J = I - 11ᵀ/n``), scaled by the square roots of their eigenvalues:
    the exact placement when the distances are Euclidean in two dimensions, the best rank-2
    fit of ``B`` otherwise. Deterministic (each axis signed so that its largest coordinate is
    positive), no random start and no iterations."""
    d = dist.double()
    n = d.shape[0]
    j = torch.eye(n, dtype=torch.float64) - 1.0 / n
    b = -0.5 * j @ (d * d) @ j
    vals, vecs = torch.linalg.eigh((b + b.T) / 2)                   # ascending
    vals, vecs = vals.flip(0)[:2].clamp_min(0), vecs.flip(1)[:, :2]
    sign = torch.sign(vecs.gather(0, vecs.abs().argmax(0, keepdim=True)))
    xy = vecs * sign.where(sign != 0, 1.0) * vals.sqrt()
    return torch.nn.functional.pad(xy, (0, 2 - xy.shape[1]))         # one head: (1, 2)
