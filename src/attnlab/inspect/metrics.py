"""Per-head attention metrics of full maps, with the published definitions.

All functions take the maps of one sequence, ``maps (L, H, n, n)`` (rows: queries, columns:
keys; each row sums to 1), and return ``(L, H)`` tensors unless stated. The statistics that the
census also measures (entropy, largest weight, previous / next / self / sink / local mass,
distance, prefix matching) are not defined here: :func:`head_metrics` takes each row's from
:func:`attnlab.core.stats.reference_stats` and their head means from
:func:`attnlab.inspect.labels.summarize`, as the census does, so both routes give one number
and one label (:mod:`attnlab.inspect.labels`). What is only this module's: the token classes
([CLS], [SEP], punctuation), sentence blocks, and the distances between heads.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

import torch

BAND = 16            # keys within this distance of the query are local (as the census's)

METRIC_TITLES = {
    "entropy_ratio": "entropy / uniform entropy", "max_weight": "mean largest weight",
    "prev_mass": "previous-token mass", "next_mass": "next-token mass",
    "self_mass": "self mass", "cls": "[CLS] mass", "sep": "[SEP] mass",
    "punct": "'.' and ',' mass", "sink_mass": "first-token (sink) mass",
    "local_mass": f"local mass (within {BAND})", "within_segment": "within-sentence mass",
    "match_mass": "induction (prefix-matching) score",
    # causal models only (attnlab.inspect.heads, attnlab.inspect.ablation)
    "dup_mass": "duplicate-token score", "copying": "copying score (OV eigenvalues)",
    "ablation": "loss increase when zero-ablated",
}


def is_punctuation(token: str) -> bool:
    """Any punctuation token (for word-piece merging and display)."""
    t = token.removeprefix("##").removeprefix("▁").removeprefix("Ġ")
    return bool(t) and all(ch in string.punctuation for ch in t)


def is_period_or_comma(token: str) -> bool:
    """"." or "," -- the punctuation Clark et al. (2019, section 3) measure attention to."""
    return token.removeprefix("▁").removeprefix("Ġ") in (".", ",")


def token_mass(maps: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Mean over queries of the total weight on the keys where ``keys`` (bool, n) is True;
    a ``(k, n)`` stack of key sets gives ``(k, L, H)``."""
    keys = keys.to(maps.dtype)
    if keys.dim() == 1:
        return (maps @ keys).mean(-1)                                # one read, no product
    return (maps @ keys.T).mean(-2).movedim(-1, 0)                   # (L, H, n, k) -> (k, L, H)


@dataclass
class HeadMetrics:
    """Every metric, ``(L, H)`` tensors, for one sequence or averaged over a corpus; the names
    are those of the census's summary (:mod:`attnlab.inspect.labels`)."""

    entropy: torch.Tensor
    entropy_ratio: torch.Tensor
    max_weight: torch.Tensor
    prev_mass: torch.Tensor
    next_mass: torch.Tensor
    self_mass: torch.Tensor
    prev_argmax: torch.Tensor
    next_argmax: torch.Tensor
    self_argmax: torch.Tensor
    cls: torch.Tensor
    sep: torch.Tensor
    punct: torch.Tensor
    sink_mass: torch.Tensor
    local_mass: torch.Tensor
    distance: torch.Tensor
    special_mass: torch.Tensor
    local_uniform: torch.Tensor                     # a uniform head's local mass (labels.py)
    within_segment: torch.Tensor | None = None
    match_mass: torch.Tensor | None = None          # with token ids
    dup_mass: torch.Tensor | None = None            # with token ids
    # causal models: the OV copying score and zero-ablation importance, where measured
    copying: torch.Tensor | None = None
    ablation: torch.Tensor | None = None
    # what a uniform head scores on the same rows, and the rows a subset statistic reads:
    # (len(labels.BASELINE_KEYS), L, H), NaN where not measured
    baselines: torch.Tensor | None = None

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
                 segments: torch.Tensor | None = None,
                 ids: torch.Tensor | None = None) -> HeadMetrics:
    """All metrics of one sequence. ``segments (n,)`` marks sentence A / B of a pair; ``ids
    (n,)``, the token ids, give the prefix-matching score ``match_mass``."""
    from attnlab.core.stats import reference_stats
    from attnlab.inspect.labels import is_causal, summarize

    maps = maps.double()
    n = maps.shape[-1]
    if len(tokens) != n:
        raise ValueError(f"tokens has {len(tokens)} entries but the maps are {n} x {n}")
    if ids is not None:
        ids = torch.as_tensor(ids).reshape(-1)
        if ids.numel() != n:
            raise ValueError(f"ids has {ids.numel()} entries but the maps are {n} x {n}")
    per_layer = [reference_stats(layer, ids=ids, band=BAND) for layer in maps]   # no L*N^2 temp
    rows = {name: torch.stack([getattr(s, name) for s in per_layer])
            for name in ("entropy", "max_weight", "argmax", "tied", "sink_mass", "prev_mass",
                         "self_mass", "next_mass", "local_mass", "distance", "received")}
    if ids is not None:
        rows["match_mass"] = torch.stack([s.match_mass for s in per_layer])
        rows["dup_mass"] = torch.stack([s.dup_mass for s in per_layer])
    summary = summarize(rows, maps.sum(-1) > 0, causal=is_causal(maps), ids=ids, band=BAND)
    is_cls = torch.tensor([t in ("[CLS]", "<s>", "<cls>") for t in tokens])
    is_sep = torch.tensor([t in ("[SEP]", "</s>", "<sep>") for t in tokens])
    is_punct = torch.tensor([is_period_or_comma(t) for t in tokens])       # as Clark et al.
    within = None
    if segments is not None and segments.unique().numel() > 1:
        same = segments[:, None] == segments[None, :]                  # (n, n)
        within = (maps * same.to(maps.dtype)).sum(-1).mean(-1).float()
    cls_mass, sep_mass, punct_mass = token_mass(maps, torch.stack([is_cls, is_sep, is_punct]))
    f32 = {name: t.float() for name, t in summary.items()}
    return HeadMetrics(
        **{name: f32[name] for name in (
            "entropy", "entropy_ratio", "max_weight", "prev_mass", "next_mass", "self_mass",
            "prev_argmax", "next_argmax", "self_argmax", "sink_mass", "local_mass",
            "distance", "local_uniform")},
        cls=cls_mass.float(), sep=sep_mass.float(), punct=punct_mass.float(),
        special_mass=(sep_mass + punct_mass).float(), within_segment=within,
        match_mass=f32.get("match_mass"), dup_mass=f32.get("dup_mass"),
        baselines=baselines_of(f32))


def baselines_of(summary: dict) -> torch.Tensor:
    """The summary's baselines and row counts (:data:`attnlab.inspect.labels.BASELINE_KEYS`)
    as one ``(K, L, H)`` tensor, NaN where a key was not measured."""
    from attnlab.inspect.labels import BASELINE_KEYS

    shape = summary["entropy"].shape
    nan = torch.full(shape, float("nan"))
    return torch.stack([summary[k].float() if k in summary else nan for k in BASELINE_KEYS])


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
