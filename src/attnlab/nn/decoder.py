"""Transformer decoder and the full encoder-decoder: DecoderLayer, Decoder, Transformer.

A decoder layer has three sub-layers (Vaswani et al. 2017, section 3.1): masked
self-attention over the target, cross-attention from the target to the encoder's output
(``memory``), and the feed-forward network. Post-LN (default) wraps each as
``LayerNorm(x + Sublayer(x))``; pre-LN (``norm_first=True``) as ``x + Sublayer(LayerNorm(x))``::

    x = norm1(x + SelfAttn(x, x, x))            x = x + SelfAttn(norm1(x))
    x = norm2(x + CrossAttn(x, mem, mem))       x = x + CrossAttn(norm2(x), mem)
    x = norm3(x + FFN(x))                       x = x + FFN(norm3(x))

Arguments and parameter names follow ``torch.nn.TransformerDecoderLayer`` /
``TransformerDecoder`` / ``Transformer`` (``self_attn``, ``multihead_attn``, ``norm1..3``; the
FFN's ``linear1``/``linear2`` live in ``ff``), so ``from_torch`` / ``to_torch`` convert with the
weights. Masks keep torch's polarity (bool True = masked out / padding).

Incremental decoding: :meth:`Decoder.new_cache` gives one :class:`~attnlab.nn.multihead.KVCache`
per layer; passing it with the next target token(s) attends over every earlier token's cached
keys and values (bottom-right causal alignment), and equals the full-sequence forward.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn as nn

from attnlab.nn.multihead import KVCache, MultiheadAttention, not_torch_twin
from attnlab.nn.transformer import (
    Encoder,
    EncoderLayer,
    FeedForward,
    TorchStack,
    layer_from_torch,
    layer_to_torch,
)


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention, FFN, each with a residual
    connection and LayerNorm (post-LN by default, pre-LN with ``norm_first=True``).

    Shapes: ``tgt (B, N_t, E)`` and ``memory (B, N_s, E)`` if batch_first, else ``(N, B, E)``.

    Example:
        >>> layer = DecoderLayer(32, 4, 64, batch_first=True)
        >>> layer(torch.randn(2, 5, 32), torch.randn(2, 7, 32), tgt_is_causal=True).shape
        torch.Size([2, 5, 32])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1,
                 activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, backend: str = "auto",
                 device=None, dtype=None, qk_norm: str | None = None,
                 softcap: float | None = None, temperature: float = 1.0):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        mha = dict(dropout=dropout, bias=bias, batch_first=True, backend=backend,
                   qk_norm=qk_norm, softcap=softcap, temperature=temperature, **factory)
        self.self_attn = MultiheadAttention(d_model, nhead, **mha)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **mha)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias, **factory)
        self.norm1, self.norm2, self.norm3 = (
            nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))
        self.norm_first, self.batch_first = norm_first, batch_first

    def _sa(self, x, mask, kpm, causal, cache):
        out, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=kpm,
                                need_weights=False, is_causal=causal, kv_cache=cache)
        return self.dropout1(out)

    def _ca(self, x, mem, mask, kpm, causal):
        out, _ = self.multihead_attn(x, mem, mem, attn_mask=mask, key_padding_mask=kpm,
                                     need_weights=False, is_causal=causal)
        return self.dropout2(out)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor,
                tgt_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                tgt_key_padding_mask: torch.Tensor | None = None,
                memory_key_padding_mask: torch.Tensor | None = None,
                tgt_is_causal: bool | None = False, memory_is_causal: bool = False,
                cache: KVCache | None = None) -> torch.Tensor:
        """As ``torch.nn.TransformerDecoderLayer.forward``; ``tgt_is_causal=True`` applies the
        causal mask itself (None: torch's "detect it from tgt_mask", which is applied anyway).
        ``cache``: this layer's :class:`KVCache` for incremental decoding."""
        x, mem = tgt, memory
        if not self.batch_first:                              # (N, B, E) -> (B, N, E)
            x, mem = x.transpose(0, 1), mem.transpose(0, 1)
        causal = bool(tgt_is_causal)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask, tgt_key_padding_mask, causal, cache)
            x = x + self._ca(self.norm2(x), mem, memory_mask, memory_key_padding_mask,
                             memory_is_causal)
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            x = self.norm1(x + self._sa(x, tgt_mask, tgt_key_padding_mask, causal, cache))
            x = self.norm2(x + self._ca(x, mem, memory_mask, memory_key_padding_mask,
                                        memory_is_causal))
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return x if self.batch_first else x.transpose(0, 1)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer,
                   backend: str = "auto") -> "DecoderLayer":
        """An attnlab layer with the configuration and weights of a torch one."""
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(not_torch_twin(layer, nn.TransformerDecoderLayer, "layer"))
        return layer_from_torch(cls, layer, backend)

    def to_torch(self) -> nn.TransformerDecoderLayer:
        """A torch.nn.TransformerDecoderLayer with the same configuration and weights."""
        return layer_to_torch(self, nn.TransformerDecoderLayer)


class Decoder(TorchStack, nn.Module):
    """A stack of ``num_layers`` copies of a :class:`DecoderLayer`, with an optional final
    norm (torch's ``TransformerDecoder``)."""

    TORCH = nn.TransformerDecoder
    LAYER = DecoderLayer

    def __init__(self, layer: DecoderLayer, num_layers: int, norm: nn.Module | None = None):
        super().__init__()
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be an int >= 1, got {num_layers!r}")
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))
        self.norm = norm

    def new_cache(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer, for :meth:`forward`'s ``cache``."""
        return [KVCache() for _ in self.layers]

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor,
                tgt_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                tgt_key_padding_mask: torch.Tensor | None = None,
                memory_key_padding_mask: torch.Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False,
                cache: list[KVCache] | None = None) -> torch.Tensor:
        """As ``torch.nn.TransformerDecoder.forward``; with ``cache`` (from :meth:`new_cache`)
        ``tgt`` holds only the new target tokens."""
        if cache is not None and len(cache) != len(self.layers):
            raise ValueError(f"cache has {len(cache)} entries for {len(self.layers)} layers; "
                             "make it with new_cache()")
        x = tgt
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal,
                      cache=None if cache is None else cache[i])
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):
    """The encoder-decoder Transformer, with torch.nn.Transformer's arguments, parameter names
    and forward; the encoder and decoder stacks end in a LayerNorm as torch's do.

    Example:
        >>> model = Transformer(32, 4, 2, 2, 64, batch_first=True)
        >>> model(torch.randn(2, 7, 32), torch.randn(2, 5, 32), tgt_is_causal=True).shape
        torch.Size([2, 5, 32])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1,
                 activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, backend: str = "auto",
                 device=None, dtype=None):
        super().__init__()
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                  layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first,
                  bias=bias, backend=backend, device=device, dtype=dtype)
        norm = dict(eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.encoder = Encoder(EncoderLayer(d_model, nhead, **kw), num_encoder_layers,
                               norm=nn.LayerNorm(d_model, **norm))
        self.decoder = Decoder(DecoderLayer(d_model, nhead, **kw), num_decoder_layers,
                               norm=nn.LayerNorm(d_model, **norm))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask=None, tgt_mask=None,
                memory_mask=None, src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> torch.Tensor:
        """As ``torch.nn.Transformer.forward``: encode ``src``, decode ``tgt`` against it."""
        memory = self.encode(src, src_mask, src_key_padding_mask, src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    def encode(self, src, src_mask=None, src_key_padding_mask=None, src_is_causal=None):
        """The encoder's output (the decoder's ``memory``)."""
        return self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                            is_causal=src_is_causal)

    @classmethod
    def from_torch(cls, model: nn.Transformer, backend: str = "auto") -> "Transformer":
        """An attnlab Transformer with the layers and weights of a torch one."""
        if not isinstance(model, nn.Transformer):
            raise TypeError(not_torch_twin(model, nn.Transformer, "model"))
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.encoder = Encoder.from_torch(model.encoder, backend)
        new.decoder = Decoder.from_torch(model.decoder, backend)
        new.d_model, new.nhead, new.batch_first = model.d_model, model.nhead, model.batch_first
        new.train(model.training)
        return new

    def to_torch(self) -> nn.Transformer:
        """A torch.nn.Transformer with the same layers and weights."""
        enc, dec = self.encoder.to_torch(), self.decoder.to_torch()
        state = {f"{part}.{k}": v.detach().clone() for part, m in (("encoder", enc),
                                                                   ("decoder", dec))
                 for k, v in m.state_dict().items()}
        model = nn.Transformer(self.d_model, self.nhead, custom_encoder=enc, custom_decoder=dec,
                               batch_first=self.batch_first)
        model.load_state_dict(state)       # its __init__ re-initialized the custom stacks
        return model.train(self.training)
