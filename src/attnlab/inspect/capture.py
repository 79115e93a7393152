"""Capture attention maps from a model: attnlab modules, torch.nn.MultiheadAttention (also inside
nn.TransformerEncoderLayer), and Hugging Face transformers models.

    with record(model) as rec:
        model(**batch)
    maps = rec.maps(0, length=n)        # (layers, heads, n, n) for the first sequence

How each kind is captured, without replacing anyone's code:

* attnlab modules report their weights through a context variable that they check
  (:mod:`attnlab.nn.recording`);
* ``torch.nn.MultiheadAttention``: a forward pre-hook (torch's hook API, ``with_kwargs``) asks for
  ``need_weights=True, average_attn_weights=False`` and a forward hook takes the weights and
  hands the caller what it asked for. ``nn.TransformerEncoderLayer`` calls its attention with
  ``need_weights=False`` and may skip it entirely on torch's fused inference path, so that path
  is switched off while recording;
* Hugging Face models: their attention modules dispatch through transformers' attention
  interface; :mod:`attnlab.integrations.transformers` registers attnlab's core there and the
  recorder selects its reference name with the mask of the model's own implementation, so
  every map comes from :func:`attnlab.attention` and the outputs do not change. (The default
  ``sdpa`` implementation returns no maps at all, even with ``output_attentions=True``.)

If nothing was captured the context raises, rather than returning empty results.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn

from attnlab.integrations import transformers as hf
from attnlab.nn import recording
from attnlab.nn.multihead import MultiheadAttention as AttnlabMHA

_MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal")


KINDS = ("self", "causal", "cross")
_NOTHING_TO_RECORD = ("no attnlab module, no torch.nn.MultiheadAttention and is not a "
                      "transformers model")


def _kind(module, name: str, weights: torch.Tensor) -> str:
    """``"cross"`` for a module named as cross-attention (BART/Marian/Whisper ``encoder_attn``,
    T5 ``EncDecAttention``, BERT ``crossattention``, torch ``multihead_attn``); a transformers
    module's own ``is_causal`` flag; otherwise ``"causal"`` for square maps with no weight
    above the diagonal, else ``"self"``."""
    last = name.rsplit(".", 2)
    if any(c in part for part in last for c in _CROSS_NAMES):
        return "cross"
    flag = getattr(module, "is_causal", None)
    if isinstance(flag, bool):
        return "causal" if flag else "self"
    n_q, n_k = weights.shape[-2:]
    if n_q == n_k and n_q > 1 and not torch.triu(weights.detach(), diagonal=1).any():
        return "causal"
    return "self"


class Recording:
    """Attention maps in call order, one ``(B, H, N_q, N_k)`` tensor per attention call, with
    the calling module's name (``sources``), its kind (``kinds``: ``"self"``, ``"causal"`` or
    ``"cross"``) and, where the module said, the vectors behind the map (``raw_vectors``:
    ``(q, k, v, scale)`` or None)."""

    def __init__(self, names: dict[int, str]):
        self._names = names
        self.raw: list[torch.Tensor] = []
        self.raw_vectors: list[tuple | None] = []
        self.sources: list[str] = []
        self.kinds: list[str] = []

    def add(self, module, weights: torch.Tensor, vectors=None) -> None:
        """Record ``weights (B, H, N_q, N_k)`` from ``module`` with its name and kind, and the
        ``(q, k, v, scale)`` they came from when given (see :mod:`attnlab.nn.recording`)."""
        name = self._names.get(id(module), type(module).__name__)
        self.raw.append(weights)
        self.raw_vectors.append(vectors)
        self.sources.append(name)
        self.kinds.append(_kind(module, name, weights))

    def __len__(self) -> int:
        return len(self.raw)

    def maps(self, index: int = 0, length: int | None = None,
             attention_mask: torch.Tensor | None = None, *, kind: str | None = None,
             key_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(layers, heads, n_q, n_k)`` of sequence ``index`` of the batch, padding excluded,
        detached, float64.

        Args:
            length: its number of real tokens when they come first (right padding).
            attention_mask: ``(B, N)`` or ``(N,)`` with 1 at real tokens (Hugging Face's
                polarity): picks the real positions wherever they are, so a left-padded batch
                (the usual padding of decoder models) gives real rows, not padding.
            kind: only the calls of this kind (``"self"``, ``"causal"``, ``"cross"``); needed
                when an encoder-decoder recorded maps of several kinds.
            key_attention_mask: the real positions of the keys where they differ from the
                queries' (the encoder's mask for cross-attention); default ``attention_mask``.
        """
        chosen = self._chosen(kind)
        rows, cols = self._positions(chosen[0][0], index, length, attention_mask,
                                     key_attention_mask)
        # float64 as the metrics want it; past 16M weights float32 (a 12 x 12-head model at
        # 1024 tokens holds 151M: 1.2 GB in float64)
        big = len(chosen) * chosen[0][0].shape[1] * len(rows) * len(cols) > 16_000_000
        dtype = torch.float32 if big else torch.float64
        return torch.stack([_take(w[index], rows, cols).detach().to(dtype) for w, _ in chosen])

    def vectors(self, index: int = 0, length: int | None = None,
                attention_mask: torch.Tensor | None = None, *, kind: str | None = None,
                key_attention_mask: torch.Tensor | None = None):
        """The vectors behind :meth:`maps` (the same arguments): ``q (L, H, n_q, D)``,
        ``k (L, H, n_k, D)``, ``v (L, H, n_k, D_v)`` float32 and the scales ``(L,)`` with
        ``scores = q k^T * scale`` (before any mask or bias); None if a module did not report
        them."""
        chosen = self._chosen(kind)
        if any(vec is None for _, vec in chosen):
            return None
        rows, cols = self._positions(chosen[0][0], index, length, attention_mask,
                                     key_attention_mask)
        q = torch.stack([_take(vec[0][index], rows, None).float() for _, vec in chosen])
        k = torch.stack([_take(vec[1][index], cols, None).float() for _, vec in chosen])
        v = torch.stack([_take(vec[2][index], cols, None).float() for _, vec in chosen])
        scale = torch.tensor([float(vec[3]) for _, vec in chosen])
        return q, k, v, scale

    def _chosen(self, kind):
        if not self.raw:
            raise RuntimeError("no attention maps were recorded")
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)} or None, got {kind!r}")
        chosen = [(w, vec) for w, vec, k in zip(self.raw, self.raw_vectors, self.kinds)
                  if kind is None or k == kind]
        if not chosen:
            raise ValueError(f"no {kind} attention was recorded; recorded kinds: "
                             f"{', '.join(sorted(set(self.kinds)))}")
        if kind is None and len({w.shape[-2:] for w, _ in chosen}) > 1:
            raise ValueError("the recorded maps have different shapes (kinds: "
                             f"{', '.join(sorted(set(self.kinds)))}); pick one with kind=")
        return chosen

    @staticmethod
    def _positions(w, index, length, attention_mask, key_attention_mask):
        """The real rows and columns of sequence ``index`` (see :meth:`maps`)."""
        device = w.device

        def real(m):
            m = m[index] if m.dim() == 2 else m
            return m.bool().nonzero().flatten().to(device)

        if attention_mask is not None or key_attention_mask is not None:
            rows = real(attention_mask) if attention_mask is not None else None
            cols = real(key_attention_mask) if key_attention_mask is not None else rows
            if rows is None:
                rows = torch.arange(w.shape[-2], device=device)
            if length is not None and length != rows.numel():
                raise ValueError(f"length={length} but attention_mask marks {rows.numel()} "
                                 "real tokens; give one of them")
            return rows, cols
        n_q = w.shape[-2] if length is None else length
        n_k = w.shape[-1] if length is None else length
        return range(n_q), range(n_k)


def _take(t: torch.Tensor, rows, cols) -> torch.Tensor:
    """``t (H, N, M)`` at ``rows`` (dim 1) and ``cols`` (dim 2, unless None): slices for
    ranges (no copy), indexing for index tensors."""
    if isinstance(rows, range):
        t = t[:, rows.start:rows.stop]
    else:
        t = t[:, rows]
    if cols is None:
        return t
    if isinstance(cols, range):
        return t[:, :, cols.start:cols.stop]
    return t[:, :, cols]


def _torch_mha_vectors(mod: nn.MultiheadAttention, query, key, value):
    """``(q, k, v, scale)`` of a ``torch.nn.MultiheadAttention`` call, ``(B, H, N, D)``: its
    input projections applied to the call's inputs, as the module computes them (without the
    extra key of ``add_bias_kv`` / ``add_zero_attn``: None then)."""
    if mod.bias_k is not None or mod.add_zero_attn:
        return None
    if not mod.batch_first and query.dim() == 3:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    if query.dim() == 2:
        query, key, value = query[None], key[None], value[None]
    e, h = mod.embed_dim, mod.num_heads
    with torch.no_grad():
        if mod._qkv_same_embed_dim:
            w = mod.in_proj_weight.split(e)
        else:
            w = (mod.q_proj_weight, mod.k_proj_weight, mod.v_proj_weight)
        b = (None,) * 3 if mod.in_proj_bias is None else mod.in_proj_bias.split(e)
        q, k, v = (torch.nn.functional.linear(x, wi, bi)
                   for x, wi, bi in zip((query, key, value), w, b))     # (B, N, E)
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2)
                   for t in (q, k, v))                                   # (B, H, N, D)
    return q, k, v, q.shape[-1] ** -0.5


_CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn",
                "multihead_attn")


@contextmanager
def record(model: nn.Module):
    """Record every attention map computed by ``model`` inside the ``with`` block.

    Yields a :class:`Recording`. Raises ``RuntimeError`` on exit if the block ran without an
    error but no map was captured (for example a model whose attention is not one of the three
    supported kinds).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    names = {id(m): name or type(m).__name__ for name, m in model.named_modules()}
    rec = Recording(names)
    handles = []
    for m in model.modules():
        if isinstance(m, nn.MultiheadAttention):
            asked: dict[str, bool] = {}

            def pre(mod, args, kwargs, asked=asked):
                kwargs = dict(kwargs, **dict(zip(_MHA_ARGS[3:], args[3:])))
                asked["need"] = kwargs.get("need_weights", True)
                asked["avg"] = kwargs.get("average_attn_weights", True)
                kwargs.update(need_weights=True, average_attn_weights=False)
                return args[:3], kwargs

            def post(mod, args, kwargs, output, asked=asked):
                out, w = output                                    # w (B, H, N_q, N_k)
                rec.add(mod, w, _torch_mha_vectors(mod, *args[:3]))
                if not asked["need"]:
                    return out, None
                return out, (w.mean(dim=-3) if asked["avg"] else w)

            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, with_kwargs=True))
    ok = False
    try:
        with hf.recorded(model):
            token = recording.push(rec)
            try:
                yield rec
                ok = True
            finally:
                recording.pop(token)
    finally:
        for h in handles:
            h.remove()
    has_attnlab = any(isinstance(m, AttnlabMHA) for m in model.modules())
    if ok and not rec.raw:
        raise RuntimeError(
            f"no attention maps were captured from {type(model).__name__}: it has "
            f"{'attnlab modules that were not called' if has_attnlab else _NOTHING_TO_RECORD}"
            "; call the model inside the with-block, or capture its attention yourself")
