"""The validated attention request every backend receives.

:func:`build_spec` checks the public arguments once, at the boundary, and returns an
:class:`AttentionSpec`; backends trust it. Every error names the argument, what was expected,
what came, and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from attnlab.core import masks as M
from attnlab.core.dropout import draw_seed
from attnlab.core.geometry import fold_band, validate_window

_FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a call with inputs of ``dtype`` is computed in: float32 for float16 and
    bfloat16 (accumulated in float32 tile by tile, as flash kernels do), else ``dtype`` itself.
    The one rule of the tiled, blocksparse and compiled loops and of the statistics."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@dataclass(frozen=True)
class AttentionSpec:
    """A checked request. Tensors q, k, v travel beside it, not inside it.

    Attributes:
        batch_shape: broadcast leading dims of q, k, v (and mask), e.g. ``(B, H)``.
        n_q, n_k, d_k, d_v: sequence lengths and head dims.
        mask: bool (True = may attend) or float (additive bias) tensor broadcastable to
            ``batch_shape + (n_q, n_k)``, or None.
        mask_fn: a mask function (see :mod:`attnlab.core.masks`), or None.
        causal: keep ``j <= i + (n_k - n_q)``.
        window: ``(left, right)`` band around the aligned position, a side may be None, or None.
        scale: multiplies q k^T (default 1/sqrt(d_k)); temperature divides it afterwards.
        softcap: c in ``s -> c * tanh(s / c)`` on the scaled scores (Gemma 2), or None.
        score_mod: ``fn(score, b, h, q_idx, kv_idx) -> score`` (FlexAttention's signature) on
            the scaled, capped scores, or None; ``captured``: the tensors it captures that
            require grad (see :mod:`attnlab.core.score_mod`).
        kv_groups: G query heads share each K/V head (grouped-query attention; 1 = none):
            q has ``batch_shape`` ``(..., H_q)``, k and v ``(..., H_q / G)`` in their last dim.
        dropout_p: dropout on the attention weights.
        dropout_seed: drawn once from the caller's generator; every backend derives the same
            keep-mask from it (see :mod:`attnlab.core.dropout`).
        need_weights, need_lse: what the caller asked to get back.
    """

    batch_shape: tuple[int, ...]
    n_q: int
    n_k: int
    d_k: int
    d_v: int
    dtype: torch.dtype
    device: torch.device
    mask: torch.Tensor | None
    mask_fn: M.MaskFn | None
    causal: bool
    window: tuple[int | None, int | None] | None
    scale: float
    temperature: float
    softcap: float | None
    score_mod: Any
    captured: tuple
    kv_groups: int
    dropout_p: float
    dropout_seed: int | None
    need_weights: bool
    need_lse: bool
    requires_grad: bool

    @property
    def kv_batch_shape(self) -> tuple[int, ...]:
        """Leading dims of k and v: ``batch_shape`` with ``H_q / kv_groups`` heads."""
        if self.kv_groups == 1:
            return self.batch_shape
        return (*self.batch_shape[:-1], self.batch_shape[-1] // self.kv_groups)

    @property
    def offset(self) -> int:
        """Aligned position of query i is ``i + offset`` (bottom-right alignment)."""
        return self.n_k - self.n_q

    @property
    def score_scale(self) -> float:
        """What q k^T is multiplied by: scale / temperature."""
        return self.scale / self.temperature

    def cap(self, s: torch.Tensor) -> torch.Tensor:
        """Soft-capping of scaled scores, in place: ``s <- c tanh(s / c)`` (no-op without it)."""
        if self.softcap is not None:
            s.div_(self.softcap).tanh_().mul_(self.softcap)
        return s

    def head_index(self, bh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat batch-head index -> (b, h) as mask and score functions see them."""
        heads = self.heads_view[1]
        return bh // heads, bh % heads

    def cap_grad(self, capped: torch.Tensor) -> torch.Tensor | None:
        """``d cap(s) / d s = 1 - tanh^2 = 1 - (capped / c)^2`` from the capped scores."""
        if self.softcap is None:
            return None
        return 1.0 - (capped / self.softcap).square()

    @property
    def band(self) -> tuple[int | None, int | None] | None:
        """Causal and window folded into one ``(left, right)`` band, or None if unbounded."""
        return fold_band(self.causal, self.window)

    @property
    def entries(self) -> int:
        """Number of scores, ``prod(batch_shape) * n_q * n_k``: the unit of the cost models."""
        return math.prod(self.batch_shape) * self.n_q * self.n_k

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the call is computed in (:func:`compute_dtype` of its inputs')."""
        return compute_dtype(self.dtype)

    @property
    def mask_kind(self) -> str:
        """``'none'``, ``'bool'`` or ``'float'``: the kind of the tensor mask."""
        if self.mask is None:
            return "none"
        return "bool" if self.mask.dtype == torch.bool else "float"

    @property
    def heads_view(self) -> tuple[int, int]:
        """(B, H) seen by mask functions: H is the last leading dim, B the product of the rest."""
        if not self.batch_shape:
            return 1, 1
        if len(self.batch_shape) == 1:
            return self.batch_shape[0], 1
        return math.prod(self.batch_shape[:-1]), self.batch_shape[-1]

    def in_heads_view(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor broadcastable to ``batch_shape + (a, b)`` as ``(B or 1, H or 1, a, b)`` in
        the (B, H) of :attr:`heads_view`: leading dims are padded on the left (a 3-D mask of
        3-D inputs is per batch, not per head); dims of size 1 stay 1 (no copy)."""
        lead = len(self.batch_shape)
        t = t.reshape(*([1] * (lead + 2 - t.dim())), *t.shape)          # (*batch-like, a, b)
        a, b = t.shape[-2:]
        if lead == 0:
            return t.reshape(1, 1, a, b)
        if lead == 1:
            return t.reshape(t.shape[0], 1, a, b)
        outer, h = t.shape[:-3], t.shape[-3]
        if all(d == 1 for d in outer):
            return t.reshape(1, h, a, b)
        t = t.expand(*self.batch_shape[:-1], h, a, b)
        return t.reshape(math.prod(self.batch_shape[:-1]), h, a, b)

    def structure_fn(self) -> M.MaskFn | None:
        """Causal, window and the user's mask function as one mask function (None if none)."""
        fns: list[M.MaskFn] = []
        band = self.band
        if band is not None:
            fns.append(M.window(band[0], band[1], offset=self.offset))
        if self.mask_fn is not None:
            fns.append(self.mask_fn)
        if not fns:
            return None
        return fns[0] if len(fns) == 1 else M.and_masks(*fns)

    def structure_tile(self, q_range: tuple[int, int],
                       kv_range: tuple[int, int]) -> torch.Tensor | None:
        """Bool keep-mask of the structured part for one tile, shaped to broadcast with
        ``batch_shape + (bq, bk)``; None when nothing structured is requested."""
        fn = self.structure_fn()
        if fn is None:
            return None
        b, h = self.heads_view
        if self.mask_fn is None:        # causal / window only: the same for every (b, h)
            b = h = 1
        tile = M.materialize(fn, self.n_q, self.n_k, batch=b, heads=h, device=self.device,
                             q_range=q_range, kv_range=kv_range)   # (b, h, bq, bk)
        bq, bk = tile.shape[-2:]
        if b == 1 and h == 1:
            return tile[0, 0]                                      # (bq, bk)
        return tile.reshape(*self.batch_shape, bq, bk)

    def dense_keep(self) -> torch.Tensor | None:
        """Bool keep-mask over all of the structure and a bool ``mask``, broadcastable to
        ``batch_shape + (n_q, n_k)``; None if nothing is masked by bool or structure."""
        keep = self.structure_tile((0, self.n_q), (0, self.n_k))
        if self.mask is not None and self.mask.dtype == torch.bool:
            keep = self.mask if keep is None else keep & self.mask
        return keep

    def float_bias(self) -> torch.Tensor | None:
        """The additive float mask, or None."""
        if self.mask is not None and self.mask.dtype != torch.bool:
            return self.mask
        return None


def describe(x: Any) -> str:
    """A value as an error message shows it: a tensor by shape and dtype."""
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """``torch.broadcast_shapes`` for plain sizes, raising its ``RuntimeError`` on a mismatch.

    torch's own imports its symbolic-shape machinery (about 1 s) the first time it runs, which
    every command would pay on its first attention call."""
    width = max((len(shape) for shape in shapes), default=0)
    out = []
    for dims in zip(*((1,) * (width - len(shape)) + tuple(shape) for shape in shapes)):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise RuntimeError(f"shapes {[tuple(shape) for shape in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _validate_qkv(q: Any, k: Any, v: Any,
                  enable_gqa: bool = False) -> tuple[tuple[int, ...], int]:
    """Check q, k, v; returns the broadcast batch shape (of q) and the K/V group size."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape (..., N, D), got "
                            f"{describe(t)}; "
                            f"convert with torch.as_tensor({name})")
        if t.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{name} must be a floating tensor (float64, float32, float16 or "
                            f"bfloat16), "
                            f"got {t.dtype}; convert with {name}.float()")
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., N, D), got shape "
                             f"{tuple(t.shape)}; "
                             f"add a sequence dim with {name}.unsqueeze(0)")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; "
                        "cast them to one, e.g. k.to(q.dtype)")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}; "
                         "move them with .to(q.device)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last dim D_k, got q {tuple(q.shape)} and "
                         f"k {tuple(k.shape)}; project them to one head dim")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys N_k (dim -2), got "
                         f"k {tuple(k.shape)} and v {tuple(v.shape)}; pair every key with a value")
    if enable_gqa:
        return _validate_groups(q, k, v)
    try:
        return tuple(broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])), 1
    except RuntimeError:
        hint = (" (fewer K/V heads than query heads: pass enable_gqa=True)"
                if q.dim() >= 3 and k.dim() >= 3 and k.shape[-3] > 1 and q.shape[-3] > k.shape[-3]
                and q.shape[-3] % k.shape[-3] == 0 else "")
        raise ValueError(f"leading dims of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
                         f"v {tuple(v.shape[:-2])} do not broadcast; give them the same (B, H) "
                         f"or size 1 where shared{hint}") from None


def _validate_groups(q, k, v) -> tuple[tuple[int, ...], int]:
    """Grouped-query attention: heads are dim -3; H_q must be a multiple of H_kv."""
    if q.dim() < 3 or k.dim() < 3 or v.dim() < 3:
        raise ValueError(f"enable_gqa needs a heads dim (..., H, N, D) on q, k and v, got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    h_q, h_k, h_v = q.shape[-3], k.shape[-3], v.shape[-3]
    if h_k != h_v or h_q % h_k:
        raise ValueError(f"enable_gqa needs k and v with the same number of heads H_kv dividing "
                         f"q's H_q, got H_q={h_q}, H_k={h_k}, H_v={h_v}; query head h uses K/V "
                         f"head h // (H_q / H_kv)")
    try:
        lead = tuple(broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]))
    except RuntimeError:
        raise ValueError(f"leading dims before the heads of q {tuple(q.shape[:-3])}, k "
                         f"{tuple(k.shape[:-3])} and v {tuple(v.shape[:-3])} do not broadcast"
                         ) from None
    return (*lead, h_q), h_q // h_k


def _validate_mask(mask: Any, batch_shape: tuple[int, ...], n_q: int, n_k: int,
                   device: torch.device) -> tuple[torch.Tensor | None, M.MaskFn | None]:
    if mask is None:
        return None, None
    if callable(mask) and not isinstance(mask, torch.Tensor):
        if len(batch_shape) > 2:
            raise ValueError(f"a mask function needs at most 2 leading dims (B, H), q/k/v have "
                             f"{batch_shape}; reshape to (B, H, N, D) or pass a tensor mask")
        return None, mask
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a bool tensor (True = may attend), a float tensor (additive "
                        f"bias) or a mask function, got {describe(mask)}; build one with "
                        "attnlab.core.masks")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may attend) or floating (additive bias), got "
                        f"{mask.dtype}; use mask.bool() if 1 means 'attend', or "
                        "attnlab.core.masks.to_additive(mask.bool())")
    target = (*batch_shape, n_q, n_k)
    try:
        ok = tuple(broadcast_shapes(mask.shape, target)) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (..., N_q, "
                         f"N_k) = "
                         f"{target}; give it shape (N_q, N_k), (B, 1, N_q, N_k) or {target}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}; move it with "
                         f"mask.to(q.device)")
    return mask, None


def causal_bias_variant(mask: Any, n_q: int, n_k: int, name: str = "mask") -> str | None:
    """``"lower_right"`` or ``"upper_left"`` where ``mask`` is a
    ``torch.nn.attention.bias.CausalBias`` built for ``(n_q, n_k)`` (else a ValueError naming
    ``name``), None for any other mask."""
    # A CausalBias exists only once its module is imported; importing it to ask would pull in
    # torch._dynamo (4 s) on the first call of every process.
    import sys

    bias = sys.modules.get("torch.nn.attention.bias")
    if mask is None or bias is None or not isinstance(mask, bias.CausalBias):
        return None
    if (mask.seq_len_q, mask.seq_len_kv) != (n_q, n_k):
        raise ValueError(f"{name} is a CausalBias for ({mask.seq_len_q}, {mask.seq_len_kv}) but "
                         f"the inputs give (N_q, N_k) = ({n_q}, {n_k}); build it with "
                         f"causal_lower_right({n_q}, {n_k})")
    return "lower_right" if mask.variant == bias.CausalVariant.LOWER_RIGHT else "upper_left"


def _causal_bias(mask: Any, causal: bool, n_q: int, n_k: int):
    """``torch.nn.attention.bias.CausalBias`` as a mask: ``causal_lower_right`` is attnlab's
    own causal (bottom-right aligned), ``causal_upper_left`` (SDPA's ``is_causal``) keeps
    ``j <= i`` as a mask function. Returns ``(mask, causal)``."""
    variant = causal_bias_variant(mask, n_q, n_k)
    if variant is None:
        return mask, causal
    if variant == "lower_right":
        return None, True
    return M.causal(offset=0), causal                                  # upper left: j <= i


def _validate_score_mod(score_mod: Any, batch_shape: tuple[int, ...]) -> tuple:
    if score_mod is None:
        return ()
    if not callable(score_mod) or isinstance(score_mod, torch.Tensor):
        raise TypeError(f"score_mod must be a function score_mod(score, b, h, q_idx, kv_idx) -> "
                        f"score (FlexAttention's signature), got {describe(score_mod)}; for a "
                        "fixed additive bias pass a float mask instead")
    if len(batch_shape) > 2:
        raise ValueError(f"a score_mod needs at most 2 leading dims (B, H), q/k/v have "
                         f"{batch_shape}; reshape to (B, H, N, D)")
    from attnlab.core.score_mod import captured_tensors

    return tuple(captured_tensors(score_mod)) if torch.is_grad_enabled() else ()


_FIX = {"scale": "leave it None for 1/sqrt(D_k)", "temperature": "use 1.0 for plain softmax",
        "softcap": "leave it None for no capping, or give the cap c (Gemma 2 uses 50)"}


def _validate_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}; "
                         f"{_FIX[name]}")
    return float(value)


def build_spec(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
               window: Any = None, scale: float | None = None, temperature: float = 1.0,
               dropout_p: float = 0.0, generator: torch.Generator | None = None,
               softcap: float | None = None, score_mod: Any = None, enable_gqa: bool = False,
               return_weights: bool = False, return_lse: bool = False) -> AttentionSpec:
    """Validate the public arguments of :func:`attnlab.attention` and build the spec."""
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be True or False, got {describe(enable_gqa)}")
    batch_shape, groups = _validate_qkv(q, k, v, enable_gqa)
    captured = _validate_score_mod(score_mod, batch_shape)
    return spec_from_shapes(
        batch_shape, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], q.dtype, q.device,
        requires_grad=torch.is_grad_enabled() and any(t.requires_grad
                                                      for t in (q, k, v, *captured)),
        score_mod=score_mod, captured=captured,
        mask=mask, causal=causal, window=window, scale=scale, temperature=temperature,
        dropout_p=dropout_p, generator=generator, softcap=softcap, kv_groups=groups,
        return_weights=return_weights, return_lse=return_lse)


def spec_from_shapes(batch_shape: tuple[int, ...], n_q: int, n_k: int, d_k: int, d_v: int,
                     dtype: torch.dtype, device: torch.device, *, requires_grad: bool,
                     mask: Any = None, causal: bool = False, window: Any = None,
                     scale: float | None = None, temperature: float = 1.0,
                     dropout_p: float = 0.0, generator: torch.Generator | None = None,
                     softcap: float | None = None, kv_groups: int = 1, score_mod: Any = None,
                     captured: tuple = (),
                     return_weights: bool = False, return_lse: bool = False) -> AttentionSpec:
    """Validate everything but the tensors q, k, v (already checked, or never made, as for
    precomputed scores) and build the spec from their shapes."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {describe(causal)}")
    mask, causal = _causal_bias(mask, causal, n_q, n_k)
    mask_t, mask_fn = _validate_mask(mask, batch_shape, n_q, n_k, device)
    for name, flag in (("return_weights", return_weights), ("return_lse", return_lse)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {describe(flag)}")
    scale_f = 1.0 / math.sqrt(d_k) if scale is None else _validate_positive("scale", scale)
    temp = _validate_positive("temperature", temperature)
    cap = None if softcap is None else _validate_positive("softcap", softcap)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) \
            or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}; use 0.0 for no dropout "
                         "(and 0.0 at evaluation time)")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {describe(generator)}")
    return AttentionSpec(
        batch_shape=tuple(batch_shape), n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v, dtype=dtype,
        device=device, mask=mask_t, mask_fn=mask_fn, causal=causal,
        window=validate_window(window), scale=scale_f, temperature=temp, softcap=cap,
        kv_groups=kv_groups, score_mod=score_mod, captured=tuple(captured),
        dropout_p=float(dropout_p),
        dropout_seed=draw_seed(generator) if dropout_p > 0 else None, need_weights=return_weights,
        need_lse=return_lse, requires_grad=requires_grad,
    )


@dataclass(frozen=True)
class AttentionOutput:
    """What :func:`attnlab.attention` returns when weights or lse are asked for.

    Attributes:
        out: ``(..., N_q, D_v)``.
        weights: ``(..., N_q, N_k)`` the weights applied to v (after dropout), or None.
        lse: ``(..., N_q)`` log-sum-exp of the scaled, masked scores (-inf on fully masked
            rows), or None.
    """

    out: torch.Tensor
    weights: torch.Tensor | None = None
    lse: torch.Tensor | None = None
