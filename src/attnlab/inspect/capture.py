"""Capture attention maps from a model: attnlab modules, torch.nn.MultiheadAttention (also inside
nn.TransformerEncoderLayer), and Hugging Face transformers models.

    with record(model) as rec:
        model(**batch)
    maps = rec.maps(0, length=n)        # (layers, heads, n, n) for the first sequence

How each kind is captured, without replacing anyone's code:

* attnlab modules report their weights through a context variable that they check
  (:mod:`attnlab.nn._recording`);
* ``torch.nn.MultiheadAttention``: a forward pre-hook (torch's hook API, ``with_kwargs``) asks for
  ``need_weights=True, average_attn_weights=False`` and a forward hook takes the weights and
  hands the caller what it asked for. ``nn.TransformerEncoderLayer`` calls its attention with
  ``need_weights=False`` and may skip it entirely on torch's fused inference path, so that path
  is switched off while recording;
* Hugging Face models: their attention modules dispatch through transformers' attention
  interface; attnlab registers its core there (``"attnlab"``) and selects it while recording, so
  every map comes from :func:`attnlab.attention`. (The default ``sdpa`` implementation returns no
  maps at all, even with ``output_attentions=True``.)

If nothing was captured the context raises, rather than returning empty results.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn

from attnlab.core import attention
from attnlab.nn import _recording
from attnlab.nn.multihead import MultiheadAttention as AttnlabMHA

HF_IMPLEMENTATION = "attnlab"
_MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal")


class Recording:
    """Attention maps in call order, one ``(B, H, N_q, N_k)`` tensor per attention call."""

    def __init__(self, names: dict[int, str]):
        self._names = names
        self.raw: list[torch.Tensor] = []
        self.sources: list[str] = []

    def add(self, module, weights: torch.Tensor) -> None:
        self.raw.append(weights)
        self.sources.append(self._names.get(id(module), type(module).__name__))

    def __len__(self) -> int:
        return len(self.raw)

    def maps(self, index: int = 0, length: int | None = None,
             attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(layers, heads, n, n)`` of sequence ``index`` of the batch, padding excluded,
        detached, float64.

        Args:
            length: its number of real tokens when they come first (right padding).
            attention_mask: ``(B, N)`` or ``(N,)`` with 1 at real tokens (Hugging Face's
                polarity): picks the real positions wherever they are, so a left-padded batch
                (the usual padding of decoder models) gives real rows, not padding.
        """
        if not self.raw:
            raise RuntimeError("no attention maps were recorded")
        if attention_mask is not None:
            m = attention_mask[index] if attention_mask.dim() == 2 else attention_mask
            real = m.bool().nonzero().flatten().to(self.raw[0].device)
            if length is not None and length != real.numel():
                raise ValueError(f"length={length} but attention_mask marks {real.numel()} "
                                 "real tokens; give one of them")
            return torch.stack([w[index][:, real][:, :, real].detach().double()
                                for w in self.raw])
        n = self.raw[0].shape[-1] if length is None else length
        return torch.stack([w[index, :, :n, :n].detach().double() for w in self.raw])


def _hf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
    """transformers' attention-interface signature, computed by attnlab's core."""
    n_rep = query.shape[1] // key.shape[1]
    if n_rep > 1:                                            # grouped-query attention
        key = key.repeat_interleave(n_rep, dim=1)
        value = value.repeat_interleave(n_rep, dim=1)
    mask = attention_mask
    if mask is not None:
        mask = mask[..., : key.shape[-2]]
        if mask.dtype != torch.bool:
            mask = mask.to(query.dtype)                      # additive: 0 or a large negative
    causal = bool(kwargs.get("is_causal", False)) and mask is None and query.shape[2] > 1
    res = attention(query, key, value, mask=mask, causal=causal, scale=scaling,
                    dropout_p=dropout if module.training else 0.0, return_weights=True)
    _recording.report(module, res.weights)
    return res.out.transpose(1, 2).contiguous(), res.weights   # (B, N, H, D), (B, H, N, N)


def _register_hf() -> bool:
    """Register attnlab's core as a transformers attention implementation, with the SDPA-style
    mask (bool, True = may attend: the core's own polarity). Without a registered mask function
    transformers builds no padding mask at all for an unknown implementation."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return False
    AttentionInterface.register(HF_IMPLEMENTATION, _hf_attention)
    AttentionMaskInterface.register(HF_IMPLEMENTATION, sdpa_mask)
    return True


def _is_hf(model: nn.Module) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(model, PreTrainedModel)


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
                rec.add(mod, w)
                if not asked["need"]:
                    return out, None
                return out, (w.mean(dim=-3) if asked["avg"] else w)

            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, with_kwargs=True))
    hf_prev = None
    if _is_hf(model) and _register_hf():
        hf_prev = model.config._attn_implementation
        model.set_attn_implementation(HF_IMPLEMENTATION)
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    token = _recording.push(rec)
    ok = False
    try:
        yield rec
        ok = True
    finally:
        _recording.pop(token)
        torch.backends.mha.set_fastpath_enabled(fast)
        for h in handles:
            h.remove()
        if hf_prev is not None:
            model.set_attn_implementation(hf_prev)
    has_attnlab = any(isinstance(m, AttnlabMHA) for m in model.modules())
    if ok and not rec.raw:
        raise RuntimeError(
            f"no attention maps were captured from {type(model).__name__}: it has "
            f"{'attnlab modules that were not called' if has_attnlab else 'no attnlab module, no torch.nn.MultiheadAttention and is not a transformers model'}"
            "; call the model inside the with-block, or capture its attention yourself")
