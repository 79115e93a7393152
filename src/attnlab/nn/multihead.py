"""Multi-head attention that is interchangeable with ``torch.nn.MultiheadAttention``.

    head_h = attention(X W_q^h, X W_k^h, X W_v^h)       (B, H, N_q, D_h)
    out    = concat_h(head_h) W_o + b_o                 (B, N_q, E)

Parameters carry torch's names (``in_proj_weight``, ``q_proj_weight``, ``out_proj``...), so a
``state_dict`` moves between the two classes unchanged; :meth:`MultiheadAttention.from_torch` and
:meth:`MultiheadAttention.to_torch` convert modules.

Mask polarity. This module keeps torch's meaning at its boundary:

* ``attn_mask`` bool: **True = may NOT attend** (masked out); float: added to the scores.
* ``key_padding_mask`` bool ``(B, N_k)``: **True = padding** (ignored); float: added.

The core (:func:`attnlab.attention`) uses the opposite bool polarity, **True = may attend**;
the conversion happens once, in :func:`to_core_mask`. One difference from torch on purpose:
a query whose keys are all masked gets attention output 0 (so the module returns ``out_proj``'s
bias there), where torch returns NaN.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.core import attention
from attnlab.core.api import current_route
from attnlab.core.spec import causal_bias_variant
from attnlab.nn import recording


def _check_mask_dtype(name: str, m: torch.Tensor | None) -> None:
    if m is not None and m.dtype != torch.bool and not m.dtype.is_floating_point:
        raise TypeError(f"{name} must be bool (True = masked out, as in "
                        f"torch.nn.MultiheadAttention)"
                        f" or float (added to the scores), got {m.dtype}; use {name}.bool()")


def to_core_mask(attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None,
                  batch: int, heads: int, n_q: int, n_k: int,
                  dtype: torch.dtype) -> torch.Tensor | None:
    """torch-polarity masks -> one core mask (True = may attend, or an additive bias),
    broadcastable to ``(B, H, N_q, N_k)``."""
    parts = []
    if attn_mask is not None:
        _check_mask_dtype("attn_mask", attn_mask)
        if attn_mask.dim() == 2:
            if attn_mask.shape != (n_q, n_k):
                raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} must be (N_q, "
                                 f"N_k) = "
                                 f"{(n_q, n_k)} or (B * num_heads, N_q, N_k); fix its size")
            m = attn_mask                                                  # (N_q, N_k)
        elif attn_mask.dim() == 3:
            if attn_mask.shape != (batch * heads, n_q, n_k):
                raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} must be "
                                 f"(B * num_heads, N_q, N_k) = {(batch * heads, n_q, n_k)} or "
                                 f"(N_q, N_k); fix its size")
            m = attn_mask.view(batch, heads, n_q, n_k)                     # (B, H, N_q, N_k)
        else:
            raise ValueError(f"attn_mask must be 2-D (N_q, N_k) or 3-D (B * num_heads, N_q, N_k), "
                             f"got shape {tuple(attn_mask.shape)}")
        parts.append(m)
    if key_padding_mask is not None:
        _check_mask_dtype("key_padding_mask", key_padding_mask)
        if key_padding_mask.shape != (batch, n_k):
            raise ValueError(f"key_padding_mask of shape {tuple(key_padding_mask.shape)} must be "
                             f"(B, N_k) = {(batch, n_k)} with True at padding keys; pass one row "
                             "per batch element")
        parts.append(key_padding_mask[:, None, None, :])                  # (B, 1, 1, N_k)
    if not parts:
        return None
    if all(p.dtype == torch.bool for p in parts):
        masked = parts[0] if len(parts) == 1 else parts[0] | parts[1]
        return ~masked                                                     # True = may attend
    bias = torch.zeros((), dtype=dtype, device=parts[0].device)
    for p in parts:
        bias = bias + (torch.zeros_like(p, dtype=dtype).masked_fill(p, float("-inf"))
                       if p.dtype == torch.bool else p.to(dtype))
    return bias


class KVCache:
    """The projected keys and values one attention layer has seen, for incremental decoding.

    Each call of :meth:`MultiheadAttention.forward` with ``kv_cache=`` appends the new tokens'
    keys and values ``(B, H_kv, n_new, D_h)`` and attends over all of them; with
    ``is_causal=True`` the new queries are aligned bottom-right, so query t of the new block
    sees every earlier token and the new ones up to itself, exactly as in the full forward.
    """

    def __init__(self):
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k, v (B, H, n, D)`` and return the cached keys and values so far."""
        if self.k is not None and (self.k.shape[:2] != k.shape[:2]):
            raise ValueError(f"kv_cache holds keys for batch and heads {tuple(self.k.shape[:2])}"
                             f" but the new tokens have {tuple(k.shape[:2])}; use one cache "
                             "per sequence batch")
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


def not_torch_twin(value, torch_class: type, name: str) -> str:
    """The message of a ``from_torch`` given something other than its torch twin."""
    return f"{name} must be a torch.nn.{torch_class.__name__}, got {type(value).__name__}"


def _pad_masks(attn_mask, key_padding_mask):
    """One key more (a bias or zero key): masks get a column that masks nothing, as torch."""
    pad = [None if m is None else F.pad(m, (0, 1)) for m in (attn_mask, key_padding_mask)]
    return pad[0], pad[1]


def _causal_bias(attn_mask, is_causal: bool, n_q: int, n_k: int):
    """``torch.nn.attention.bias.CausalBias`` as a mask: lower-right is attnlab's own causal
    (bottom-right aligned); upper-left (SDPA's is_causal) becomes a bool mask, True = masked."""
    variant = causal_bias_variant(attn_mask, n_q, n_k, name="attn_mask")
    if variant is None:
        return attn_mask, is_causal
    if variant == "lower_right":
        return None, True
    keep = torch.ones(n_q, n_k, dtype=torch.bool).tril()               # upper left: j <= i
    return ~keep, is_causal


QK_NORMS = (None, "layernorm", "rmsnorm")


class MultiheadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al. 2017, section 3.2.2).

    Args:
        embed_dim: model width E (query dim and output dim).
        num_heads: H; E must be divisible by H (head dim D_h = E / H).
        dropout: dropout probability on the attention weights, in training mode only.
        bias: biases on the input and output projections.
        kdim, vdim: key and value input dims (default E); when they differ from E the Q, K, V
            projections are separate matrices, otherwise one fused ``(3E, E)`` matrix.
        add_bias_kv: append a learned key and value (``bias_k``, ``bias_v``) to every sequence,
            as torch does.
        add_zero_attn: append an all-zero key and value after the heads are split, as torch.
        batch_first: inputs ``(B, N, E)`` if True, ``(N, B, E)`` if False (torch's default).
        num_kv_heads: K/V heads for grouped-query attention (Ainslie et al. 2023; 1 = multi-
            query, Shazeer 2019); must divide ``num_heads``. Default ``num_heads`` (plain
            multi-head, convertible to torch). K/V projections then have ``num_kv_heads * D_h``
            outputs and are never repeated (the core's ``enable_gqa``).
        backend: passed to :func:`attnlab.attention` (``"auto"`` by default).
        qk_norm: ``"layernorm"`` or ``"rmsnorm"`` on each head's q and k before the dot
            product (Dehghani et al. 2023, ViT-22B; Wortsman et al. 2023): it bounds the logits
            by the norms' gains times ``sqrt(D_h)``, whatever the inputs' scale. Default None.
        softcap: cap c of ``c tanh(s / c)`` on the scaled scores (Gemma 2). Default None.
        temperature: divides the scaled scores; > 1 flattens the softmax. Default 1.0.
        These three remedies of attention-logit growth (docs/diagnostics.md) make the module
        inconvertible to torch's.

    Shapes (batch_first=True): query ``(B, N_q, E)``, key ``(B, N_k, kdim)``,
    value ``(B, N_k, vdim)`` -> output ``(B, N_q, E)`` and weights ``(B, N_q, N_k)`` averaged over
    heads, or ``(B, H, N_q, N_k)`` with ``average_attn_weights=False``. Unbatched ``(N, E)``
    inputs work too.

    Example:
        >>> mha = MultiheadAttention(64, 8, batch_first=True)
        >>> x = torch.randn(2, 10, 64)
        >>> out, w = mha(x, x, x, average_attn_weights=False)
        >>> out.shape, w.shape
        (torch.Size([2, 10, 64]), torch.Size([2, 8, 10, 10]))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 num_kv_heads: int | None = None, backend: str = "auto", device=None,
                 dtype=None, qk_norm: str | None = None, softcap: float | None = None,
                 temperature: float = 1.0):
        super().__init__()
        for name, val in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads}); "
                             f"choose num_heads among the divisors of {embed_dim} or change "
                             f"embed_dim")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if not isinstance(kv_heads, int) or isinstance(kv_heads, bool) or kv_heads <= 0 \
                or num_heads % kv_heads:
            raise ValueError(f"num_kv_heads must be a positive int dividing num_heads "
                             f"({num_heads}), got {num_kv_heads!r}")
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.num_kv_heads = kv_heads
        kv_e = kv_heads * self.head_dim                                     # K/V width
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first, self.backend = dropout, batch_first, backend
        if qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm must be one of {QK_NORMS}, got {qk_norm!r}")
        if softcap is not None and not (isinstance(softcap, (int, float)) and softcap > 0):
            raise ValueError(f"softcap must be a number > 0 or None, got {softcap!r}")
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
        self.qk_norm, self.softcap, self.temperature = qk_norm, softcap, float(temperature)
        if qk_norm is not None:                  # one norm over D_h shared by all heads
            norm = nn.LayerNorm if qk_norm == "layernorm" else nn.RMSNorm
            self.q_norm = norm(embed_dim // num_heads, **factory)
            self.k_norm = norm(embed_dim // num_heads, **factory)
        else:
            self.q_norm = self.k_norm = None
        self._split = [embed_dim, kv_e, kv_e]                              # q, k, v outputs
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty(embed_dim + 2 * kv_e, embed_dim,
                                                           **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(kv_e, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(kv_e, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(embed_dim + 2 * kv_e, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty(1, 1, kv_e, **factory))
            self.bias_v = nn.Parameter(torch.empty(1, 1, kv_e, **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as torch.nn.MultiheadAttention."""
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            nn.init.xavier_normal_(self.bias_k)
            nn.init.xavier_normal_(self.bias_v)

    def _project(self, query, key, value):
        """Inputs ``(B, N, *)`` -> q ``(B, N_q, E)``, k ``(B, N_k, E_kv)``, v ``(B, N_k, E_kv)``
        (``E_kv = num_kv_heads * D_h``, E without GQA)."""
        split = self._split
        b = self.in_proj_bias
        b_q, b_k, b_v = (None, None, None) if b is None else b.split(split)
        if self._qkv_same_embed_dim:
            if query is key and key is value:
                # Self-attention: one (B, N, E) x (E, E + 2 E_kv) matmul, then split.
                return F.linear(query, self.in_proj_weight, b).split(split, dim=-1)
            w_q, w_k, w_v = self.in_proj_weight.split(split)
            if key is value:
                k, v = F.linear(key, torch.cat([w_k, w_v]),
                                None if b is None else torch.cat([b_k, b_v])).split(split[1:],
                                                                                     dim=-1)
                return F.linear(query, w_q, b_q), k, v
            return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        return (F.linear(query, self.q_proj_weight, b_q), F.linear(key, self.k_proj_weight, b_k),
                F.linear(value, self.v_proj_weight, b_v))

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None,
                value: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
                need_weights: bool = True, attn_mask: torch.Tensor | None = None,
                average_attn_weights: bool = True, is_causal: bool | None = False,
                kv_cache: KVCache | None = None):
        """Same arguments and returns as ``torch.nn.MultiheadAttention.forward``; key and value
        default to query (self-attention). ``is_causal=True`` applies attnlab's causal mask
        (bottom-right aligned), ANDed with ``attn_mask`` if one is given; None (torch's
        "detect it from the mask") adds none.

        ``kv_cache``: a :class:`KVCache` for incremental decoding; the new keys and values are
        appended to it and the queries attend over everything it holds (masks then cover all
        of those keys: ``key_padding_mask (B, len(cache))``).

        Returns:
            ``(out, weights)``: ``out`` as the query's layout, ``weights`` or None.
        """
        key = query if key is None else key
        value = key if value is None else value
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
            batch_first = False
        else:
            batch_first = self.batch_first
        if not batch_first:                          # (N, B, E) -> (B, N, E); keep identity
            same_kv, same_qk = key is value, query is key
            query = query.transpose(0, 1)
            key = query if same_qk else key.transpose(0, 1)
            value = key if same_kv else value.transpose(0, 1)
        self._check_inputs(query, key, value)
        bsz, n_q, _ = query.shape
        n_k = key.shape[1] + (len(kv_cache) if kv_cache is not None else 0)
        is_causal = bool(is_causal)
        attn_mask, is_causal = _causal_bias(attn_mask, is_causal, n_q, n_k)
        if kv_cache is not None and (self.bias_k is not None or self.add_zero_attn):
            raise ValueError("kv_cache cannot be combined with add_bias_kv or add_zero_attn "
                             "(their extra key would be appended at every step)")
        if (self.bias_k is not None or self.add_zero_attn) \
                and getattr(current_route(), "splits_sequence", False):
            raise ValueError(sharded_extra_key_error(self))
        q, k, v = self._project(query, key, value)                       # (B, N, E), (B, N, E_kv)
        h, h_kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        if kv_cache is not None:                     # earlier tokens' keys and values first
            k_all, v_all = kv_cache.append(
                k.view(bsz, -1, self.num_kv_heads, self.head_dim).transpose(1, 2),
                v.view(bsz, -1, self.num_kv_heads, self.head_dim).transpose(1, 2))
            k, v = (t.transpose(1, 2).reshape(bsz, n_k, -1) for t in (k_all, v_all))
        if self.bias_k is not None:                  # one learned key/value more, as torch
            k = torch.cat([k, self.bias_k.expand(bsz, 1, -1)], dim=1)       # (B, N_k + 1, E_kv)
            v = torch.cat([v, self.bias_v.expand(bsz, 1, -1)], dim=1)
            attn_mask, key_padding_mask, n_k = *_pad_masks(attn_mask, key_padding_mask), n_k + 1
        q = q.view(bsz, n_q, h, d).transpose(1, 2)                       # (B, H, N_q, D_h)
        k = k.view(bsz, n_k, h_kv, d).transpose(1, 2)                    # (B, H_kv, N_k, D_h)
        v = v.view(bsz, n_k, h_kv, d).transpose(1, 2)                    # (B, H_kv, N_k, D_h)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.add_zero_attn:                       # an all-zero key/value after the heads
            k = torch.cat([k, k.new_zeros(bsz, h_kv, 1, d)], dim=2)
            v = torch.cat([v, v.new_zeros(bsz, h_kv, 1, d)], dim=2)
            attn_mask, key_padding_mask, n_k = *_pad_masks(attn_mask, key_padding_mask), n_k + 1
        mask = to_core_mask(attn_mask, key_padding_mask, bsz, h, n_q, n_k, q.dtype)
        collector = recording.census()
        if collector is not None:                    # attnlab.inspect.census: statistics only
            collector.add(self, q, k, dict(mask=mask, causal=is_causal, softcap=self.softcap,
                                           temperature=self.temperature,
                                           enable_gqa=h_kv != h))
        # While attnlab.inspect.record listens, weights are computed and reported even if the
        # caller did not ask for them (the reference backend then serves the call).
        listening = recording.listening()
        want = need_weights or listening
        res = attention(q, k, v, mask=mask, causal=is_causal, softcap=self.softcap,
                        temperature=self.temperature,
                        dropout_p=self.dropout if self.training else 0.0,
                        enable_gqa=h_kv != h, backend="auto" if listening else self.backend,
                        return_weights=want)
        if listening:
            g = h // h_kv                                 # K/V shown per query head
            vectors = (q.detach(), k.detach().repeat_interleave(g, 1),
                       v.detach().repeat_interleave(g, 1), 1.0 / (d ** 0.5 * self.temperature))
            recording.report(self, res.weights, vectors)
        out = res.out if want else res                                    # (B, H, N_q, D_h)
        out = out.transpose(1, 2).reshape(bsz, n_q, self.embed_dim)      # (B, N_q, E)
        out = self.out_proj(out)
        if not batch_first:
            out = out.transpose(0, 1)                                     # (N_q, B, E)
        if unbatched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        w = res.weights                                                   # (B, H, N_q, N_k)
        if average_attn_weights:
            w = w.mean(dim=1)                                             # (B, N_q, N_k)
        if unbatched:
            w = w.squeeze(0)
        return out, w

    def _check_inputs(self, query, key, value) -> None:
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise ValueError(f"query, key, value must all be 3-D (batched) or 2-D (unbatched), "
                             f"got {query.dim()}-D, {key.dim()}-D, {value.dim()}-D")
        for name, t, want in (("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)):
            if t.shape[-1] != want:
                arg = {"query": "embed_dim", "key": "kdim", "value": "vdim"}[name]
                raise ValueError(f"{name} has last dim {t.shape[-1]} but the module was built "
                                 f"with {arg}={want}; build it with {arg}={t.shape[-1]}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must have the same batch and length, got "
                             f"{tuple(key.shape)} and {tuple(value.shape)}")
        if query.shape[0] != key.shape[0]:
            raise ValueError(f"query and key must have the same batch size, got {query.shape[0]} "
                             f"and {key.shape[0]}; check batch_first={self.batch_first}")

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention,
                   backend: str = "auto") -> "MultiheadAttention":
        """An attnlab module with the same configuration and weights as a torch one."""
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(not_torch_twin(module, nn.MultiheadAttention, "module"))
        ref = module.out_proj.weight
        new = cls(module.embed_dim, module.num_heads, dropout=module.dropout,
                  bias=module.in_proj_bias is not None, add_bias_kv=module.bias_k is not None,
                  add_zero_attn=module.add_zero_attn, kdim=module.kdim, vdim=module.vdim,
                  batch_first=module.batch_first, backend=backend, device=ref.device,
                  dtype=ref.dtype)
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        return new

    def to_torch(self) -> nn.MultiheadAttention:
        """A torch.nn.MultiheadAttention with the same configuration and weights."""
        extras = [f"{n}={getattr(self, n)!r}" for n, off in (("qk_norm", None), ("softcap", None),
                                                              ("temperature", 1.0))
                  if getattr(self, n) != off]
        if extras:
            raise ValueError(f"torch.nn.MultiheadAttention has no {', '.join(extras)}; set them "
                             "to their defaults to convert")
        if self.num_kv_heads != self.num_heads:
            raise ValueError(f"torch.nn.MultiheadAttention has no grouped-query attention; this "
                             f"module has num_kv_heads={self.num_kv_heads} < num_heads="
                             f"{self.num_heads}, so it cannot be converted")
        ref = self.out_proj.weight
        m = nn.MultiheadAttention(self.embed_dim, self.num_heads, dropout=self.dropout,
                                  bias=self.in_proj_bias is not None,
                                  add_bias_kv=self.bias_k is not None,
                                  add_zero_attn=self.add_zero_attn, kdim=self.kdim,
                                  vdim=self.vdim, batch_first=self.batch_first,
                                  device=ref.device, dtype=ref.dtype)
        m.load_state_dict(self.state_dict())
        m.train(self.training)
        return m

    def extra_repr(self) -> str:
        """The module's sizes and options, as printed."""
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, dropout={self.dropout}, "
                f"kdim={self.kdim}, vdim={self.vdim}, batch_first={self.batch_first}, "
                f"backend={self.backend!r}")


def sharded_extra_key_error(module: nn.Module, name: str = "") -> str:
    """Why ``module`` (add_bias_kv or add_zero_attn) cannot run with its sequence sharded."""
    which = "add_bias_kv=True" if module.bias_k is not None else "add_zero_attn=True"
    where = f" ({name})" if name else ""
    return (f"MultiheadAttention{where} was built with {which}: it appends one extra key to "
            "the sequence, and with the sequence sharded every rank would append its own (P "
            "extra keys in one softmax); build it without it, or run it unsharded")
