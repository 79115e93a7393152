"""Transformer encoder: FeedForward, EncoderLayer (post-LN or pre-LN), Encoder.

Post-LN, as in the original paper (Vaswani et al. 2017, section 3.1), each sub-layer is wrapped
as ``LayerNorm(x + Sublayer(x))``::

    x = LayerNorm(x + Dropout(MultiHead(x, x, x)))          "Add & Norm"
    x = LayerNorm(x + Dropout(FFN(x)))                      FFN(x) = W_2 act(W_1 x + b_1) + b_2

Pre-LN (``norm_first=True``; Xiong et al. 2020) normalizes the sub-layer's input instead,
``x = x + Sublayer(LayerNorm(x))``: gradients at initialization are better behaved and it
trains without learning-rate warm-up, at the price of a final LayerNorm after the stack.

Constructor arguments and parameter names follow ``torch.nn.TransformerEncoderLayer``
(``self_attn``, ``norm1``, ``norm2``; the FFN's ``linear1``/``linear2`` live in ``ff``), so
:meth:`EncoderLayer.from_torch` copies weights one to one.

Initialization (``init=``):

* ``"torch"`` (default): torch's defaults (Xavier-uniform attention projections; nn.Linear's
  uniform(±1/sqrt(fan_in)) elsewhere), so a fresh layer matches a fresh torch layer's statistics.
* ``"xavier_uniform"``: every weight matrix Glorot-uniform, biases 0. Glorot & Bengio (2010)
  chose the range so activations and gradients keep their variance through linear layers; it is
  what the original Transformer code (tensor2tensor) used.
* ``"kaiming"``: the FFN's first matrix, which feeds a ReLU/GELU, gets He (Kaiming) normal
  init (He et al. 2015): ReLU zeroes half the units, so the variance must be doubled
  (gain sqrt(2)) to stay constant; other matrices Xavier-uniform, biases 0.

For a deep stack, ``Encoder(..., init="scaled")`` draws every layer's weights afresh (by
default, as in torch, the layers are copies of one layer, so at initialization they add the same
update to the residual stream L times over) and multiplies the matrices that write into the
residual stream (``self_attn.out_proj`` and ``ff.linear2``) by ``1 / sqrt(2 L)`` (Radford et al.
2019, GPT-2: the weights of residual layers scaled by 1/sqrt(N), N = 2L residual sub-layers).
Measured on a pre-LN stack (d 64, docs/diagnostics.md): the residual stream's variance at the
output grows 4.0x / 16x / 71x over the input's at 6 / 12 / 24 copied layers, 1.09x / 1.13x /
1.19x with ``init="scaled"`` (tests/explain/test_math_sections.py checks 12 layers).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.nn.multihead import MultiheadAttention, not_torch_twin

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}
_INITS = ("torch", "xavier_uniform", "kaiming")


@dataclass(frozen=True)
class EncoderLayerOutput:
    """``out (B, N, E)`` and the per-head attention map ``attention (B, H, N, N)``."""

    out: torch.Tensor
    attention: torch.Tensor


@dataclass(frozen=True)
class EncoderOutput:
    """What :class:`Encoder` returns when asked for more than the last hidden state.

    Attributes:
        last_hidden_state: ``(B, N, E)`` (layout of the input).
        hidden_states: the input and each layer's output, ``num_layers + 1`` tensors, or None.
        attentions: each layer's per-head map ``(B, H, N, N)``, or None.
    """

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def activation_of(act):
    """An FFN activation as a converter passes it on, copying behaviour exactly: torch's two
    string activations by name ("relu", "gelu"); anything else (GELU(approximate="tanh"),
    SiLU, a user function) as the callable itself, never swapped for something close."""
    if act is F.relu or act == "relu" or type(act) is nn.ReLU:
        return "relu"
    if act is F.gelu or act == "gelu" or (type(act) is nn.GELU and act.approximate == "none"):
        return "gelu"
    return copy.deepcopy(act) if isinstance(act, nn.Module) else act


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``W_2 dropout(act(W_1 x + b_1)) + b_2``.

    Shapes: ``(..., d_model) -> (..., d_model)`` through ``dim_feedforward`` hidden units.
    """

    def __init__(self, d_model: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)} or a callable, "
                                 f"got {activation!r}")
            activation = _ACTIVATIONS[activation]
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (..., E)`` -> ``linear2(dropout(activation(linear1(x))))``."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    """One Transformer encoder layer: self-attention and a feed-forward network, each with a
    residual connection and LayerNorm (post-LN by default, pre-LN with ``norm_first=True``).

    Args follow ``torch.nn.TransformerEncoderLayer``; in addition ``backend`` (passed to the
    attention core) and ``init`` (see the module docstring).

    Shapes: ``src (B, N, E)`` if batch_first else ``(N, B, E)``; ``src_mask (N, N)`` or
    ``(B * H, N, N)`` and ``src_key_padding_mask (B, N)`` with torch's polarity (bool True =
    masked / padding).

    Example:
        >>> layer = EncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
        >>> res = layer(torch.randn(2, 7, 32), return_weights=True)
        >>> res.out.shape, res.attention.shape
        (torch.Size([2, 7, 32]), torch.Size([2, 4, 7, 7]))
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1,
                 activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, backend: str = "auto",
                 init: str = "torch", device=None, dtype=None, qk_norm: str | None = None,
                 softcap: float | None = None, temperature: float = 1.0):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, backend=backend,
                                            qk_norm=qk_norm, softcap=softcap,
                                            temperature=temperature, **factory)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias, **factory)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first, self.batch_first = norm_first, batch_first
        self.reset_parameters(init)

    def reset_parameters(self, init: str = "torch") -> None:
        """Re-initialise the layer's weights with its ``init`` scheme."""
        if init not in _INITS:
            raise ValueError(f"init must be one of {', '.join(_INITS)}, got {init!r}")
        if init == "torch":
            return
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        self.self_attn.reset_parameters()
        if init == "kaiming":
            nn.init.kaiming_normal_(self.ff.linear1.weight, nonlinearity="relu")

    def _sa(self, x, attn_mask, key_padding_mask, is_causal, need_weights):
        out, w = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=need_weights, average_attn_weights=False,
                                is_causal=is_causal)
        return self.dropout1(out), w

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None,
                src_key_padding_mask: torch.Tensor | None = None, is_causal: bool | None = False,
                return_weights: bool = False) -> torch.Tensor | EncoderLayerOutput:
        """Returns the layer output, or an :class:`EncoderLayerOutput` with the per-head
        attention map ``(B, H, N, N)`` when ``return_weights`` is set."""
        is_causal = bool(is_causal)     # None (torch's "detect from the mask") = no extra mask
        x = src
        if self.norm_first:
            sa, w = self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal,
                             return_weights)
            x = x + sa
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            sa, w = self._sa(x, src_mask, src_key_padding_mask, is_causal, return_weights)
            x = self.norm1(x + sa)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return EncoderLayerOutput(x, w) if return_weights else x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer, backend: str = "auto") -> "EncoderLayer":
        """An attnlab layer with the configuration and weights of a torch one."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(not_torch_twin(layer, nn.TransformerEncoderLayer, "layer"))
        return layer_from_torch(cls, layer, backend)

    def to_torch(self) -> nn.TransformerEncoderLayer:
        """A torch.nn.TransformerEncoderLayer with the same configuration and weights."""
        return layer_to_torch(self, nn.TransformerEncoderLayer)


def layer_from_torch(cls, layer: nn.Module, backend: str):
    """An attnlab encoder or decoder layer (``cls``) from a torch one: the same arguments, the
    FFN's ``linear1`` / ``linear2`` moved into ``ff``, the activation copied exactly."""
    ref = layer.linear1.weight
    new = cls(layer.self_attn.embed_dim, layer.self_attn.num_heads,
              dim_feedforward=layer.linear1.out_features, dropout=layer.dropout.p,
              activation=activation_of(layer.activation), layer_norm_eps=layer.norm1.eps,
              batch_first=layer.self_attn.batch_first, norm_first=layer.norm_first,
              bias=layer.linear1.bias is not None, backend=backend, device=ref.device,
              dtype=ref.dtype)
    new.load_state_dict({("ff." + k if k.startswith(("linear1.", "linear2.")) else k): v
                         for k, v in layer.state_dict().items()})
    new.train(layer.training)
    return new


def layer_to_torch(layer: nn.Module, torch_cls):
    """The torch layer (``torch_cls``) with the configuration and weights of an attnlab one."""
    ref = layer.ff.linear1.weight
    out = torch_cls(layer.self_attn.embed_dim, layer.self_attn.num_heads,
                    dim_feedforward=layer.ff.linear1.out_features, dropout=layer.dropout1.p,
                    activation=activation_of(layer.ff.activation),
                    layer_norm_eps=layer.norm1.eps, batch_first=layer.batch_first,
                    norm_first=layer.norm_first, bias=layer.ff.linear1.bias is not None,
                    device=ref.device, dtype=ref.dtype)
    out.load_state_dict({(k[3:] if k.startswith("ff.") else k): v
                         for k, v in layer.state_dict().items()})
    out.train(layer.training)
    return out


class TorchStack:
    """``from_torch`` / ``to_torch`` of a stack of layers (:class:`Encoder`,
    :class:`~attnlab.nn.Decoder`): a mixin whose class names its torch twin (``TORCH``), its
    layer class (``LAYER``) and what torch's constructor takes beyond the layers
    (``TORCH_KWARGS``)."""

    TORCH: type[nn.Module]
    LAYER: type[nn.Module]
    TORCH_KWARGS: dict = {}

    @classmethod
    def from_torch(cls, stack: nn.Module, backend: str = "auto"):
        """An attnlab stack with the layers and weights of a torch one (``TORCH``)."""
        if not isinstance(stack, cls.TORCH):
            raise TypeError(not_torch_twin(stack, cls.TORCH, cls.__name__.lower()))
        return stack_from_torch(cls, [cls.LAYER.from_torch(layer, backend)
                                      for layer in stack.layers], stack.norm)

    def to_torch(self) -> nn.Module:
        """The torch stack (``TORCH``) with the same layers and weights."""
        return stack_from_torch(self.TORCH, [layer.to_torch() for layer in self.layers],
                                self.norm, **self.TORCH_KWARGS)


class Encoder(TorchStack, nn.Module):
    """A stack of ``num_layers`` copies of an :class:`EncoderLayer`, with an optional final norm
    (needed after pre-LN layers).

    Example:
        >>> enc = Encoder(EncoderLayer(32, 4, 64, batch_first=True), num_layers=2)
        >>> res = enc(torch.randn(2, 7, 32), return_weights=True, return_hidden_states=True)
        >>> len(res.attentions), len(res.hidden_states)
        (2, 3)
    """

    TORCH = nn.TransformerEncoder
    LAYER = EncoderLayer
    TORCH_KWARGS = {"enable_nested_tensor": False}

    def __init__(self, layer: EncoderLayer, num_layers: int, norm: nn.Module | None = None,
                 init: str | None = None):
        super().__init__()
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be an int >= 1, got {num_layers!r}")
        if init not in (None, "scaled"):
            raise ValueError(f"init must be None or 'scaled' (GPT-2's 1/sqrt(2L) on the "
                             f"residual projections), got {init!r}")
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))
        self.norm = norm
        if init == "scaled":
            self.redraw_layers()
            with torch.no_grad():
                for lay in self.layers:
                    for w in (lay.self_attn.out_proj.weight, lay.ff.linear2.weight):
                        w.mul_(1.0 / (2 * num_layers) ** 0.5)

    def redraw_layers(self) -> None:
        """Draw every layer's weights afresh with their modules' own initialisation (the stack
        starts as copies of one layer, as torch's TransformerEncoder does)."""
        with torch.no_grad():
            for lay in self.layers:
                for m in lay.modules():
                    if m is not lay and hasattr(m, "reset_parameters"):
                        m.reset_parameters()

    def forward(self, src: torch.Tensor, mask: torch.Tensor | None = None,
                src_key_padding_mask: torch.Tensor | None = None, is_causal: bool | None = None,
                return_weights: bool = False,
                return_hidden_states: bool = False) -> torch.Tensor | EncoderOutput:
        """The stack's output, or an :class:`EncoderOutput` with every layer's attention map
        (``return_weights``) and hidden states."""
        # torch's default None means "detect whether mask is causal"; a given mask is applied
        # either way, so None adds no causal mask of its own (True does).
        is_causal = bool(is_causal)
        x = src
        hidden, maps = [x], []
        for layer in self.layers:
            res = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=is_causal, return_weights=return_weights)
            x = res.out if return_weights else res
            if return_weights:
                maps.append(res.attention)
            hidden.append(x)
        if self.norm is not None:
            x = self.norm(x)
            hidden[-1] = x
        if not (return_weights or return_hidden_states):
            return x
        return EncoderOutput(x, tuple(hidden) if return_hidden_states else None,
                             tuple(maps) if return_weights else None)


def stack_from_torch(cls, layers: list[nn.Module], norm: nn.Module | None, **kwargs):
    """A stack ``cls(layer, num_layers, norm)`` holding exactly ``layers`` (converted one by
    one; the constructor's deep copies of the first are replaced)."""
    stack = cls(layers[0], len(layers), norm=copy.deepcopy(norm), **kwargs)
    stack.layers = nn.ModuleList(layers)
    return stack
