"""Running a model for the census and collecting what its attention calls hand over.

:class:`Collector` takes each self-attention call's :func:`attnlab.core.stats.attention_stats`
(and, where the first pass is the forward itself, hands the output back); the runners feed it
from transformers' attention interface (``run_transformers``) or from ``torch.nn``
modules (``run_module``); the rest turns the caller's text, ids and mask into the inputs.
:mod:`attnlab.inspect.census` assembles the result.
"""

from __future__ import annotations

import torch

from attnlab.core.stats import attention_stats


class Collector:
    """What the attention calls hand over: one statistics record per self-attention call."""

    def __init__(self, ids, sink_keys: int, band: int, names: dict, pooled=None, rows=None,
                 sharpest: int = 0, real=None, sink_start: int = 0,
                 value_weighted: bool = False):
        self.ids, self.sink_keys, self.band, self.names = ids, sink_keys, band, names
        self.value_weighted = value_weighted
        self.weighted: list[dict] = []             # per call: value-weighted row shares
        self.real, self.sink_start = real, sink_start      # the real tokens; the first of them
        self.pooled, self.rows, self.sharpest = pooled, rows, sharpest
        self.layers: list[tuple[object, dict, bool]] = []
        self.skipped: list[str] = []

    def add(self, module, query, key, options, value=None):
        """Take the statistics of one attention call; with ``value`` (one sequence, no
        dropout, no weights asked) also return its output where the statistics' first pass
        computed it (the same tiled forward: the model then runs that pass once), else None."""
        n_q, n_k = query.shape[2], key.shape[2]
        name = self.names.get(id(module), type(module).__name__)
        n = self.ids.numel() if self.ids is not None else (
            self.layers[0][1].lse.shape[-1] if self.layers else n_q)
        if n_q != n or n_k != n:                 # cross-attention, a pooled layer
            self.skipped.append(f"{name} (N_q={n_q}, N_k={n_k})")
            return None
        fuse = value is not None and query.shape[0] == 1
        stats = attention_stats(query[:1].detach(), key[:1].detach(),
                                value.detach() if fuse else None, sink_keys=self.sink_keys,
                                sink_start=self.sink_start, queries=self.real,
                                band=self.band, ids=self.ids, pooled=self.pooled,
                                rows=sharpest_rows(self.rows, self.sharpest),
                                **{k: _first(v) for k, v in options.items()})
        causal = bool(options.get("causal")) or getattr(module, "is_causal", False)
        out, stats.out = stats.out, None
        self.layers.append((name, stats, causal))
        if self.value_weighted:
            self.weighted.append(value_weighted_shares(module, query[:1], key[:1], value,
                                                       options, self))
        return out


def value_norms(module, value: torch.Tensor, heads: int) -> torch.Tensor:
    """``(H, N)``: the norm of what each key writes through each query head,
    ``||v_j W_O^h||`` (Kobayashi et al. 2020), with ``W_O^h`` the head's slice of the module's
    output projection (``o_proj``, ``out_proj``, ``c_proj`` or ``o``). ``value (1, H_kv, N, D)``."""
    from attnlab.inspect.ablation import _PROJECTIONS

    proj = next((getattr(module, p) for p in _PROJECTIONS
                 if isinstance(getattr(module, p, None), torch.nn.Module)), None)
    weight = getattr(proj, "weight", None)
    if weight is None:
        raise ValueError(f"{type(module).__name__} has no per-head output projection "
                         f"({', '.join(_PROJECTIONS)}): the value-weighted shares need W_O")
    _, h_kv, n, d = value.shape
    w = weight.detach().to(torch.float32)
    if type(proj).__name__ == "Conv1D":                 # GPT-2: (H * D, d_model)
        w = w.reshape(heads, d, -1)
    else:                                               # nn.Linear: (d_model, H * D)
        w = w.reshape(w.shape[0], heads, d).permute(1, 2, 0)
    v = value[0].detach().to(torch.float32).repeat_interleave(heads // h_kv, 0)   # (H, N, D)
    out = torch.empty(heads, n, dtype=torch.float32, device=value.device)
    for a in range(0, n, 1024):                         # (H, 1024, d_model) at a time
        out[:, a:a + 1024] = torch.bmm(v[:, a:a + 1024], w).norm(dim=-1)
    return out


# the statistics of the value-weighted distribution that the census keeps
VW_FIELDS = ("sink_mass", "prev_mass", "self_mass", "local_mass", "match_mass")


def value_weighted_shares(module, query, key, value, options: dict, collector) -> dict:
    """The census's statistics under the value-weighted distribution of each row (Kobayashi
    et al. 2020): ``a'_ij = a_ij n_j / sum_k a_ik n_k`` with ``n_j`` = :func:`value_norms`, the
    share of what the head writes that comes from key j. Each row's sink, previous-token,
    self, local and prefix-matching share ``(H, N)`` (``*_vw``) and the value-weighted
    attention each key receives (``received_vw``, summed over the rows that count).

    ``a'`` is a softmax itself, of the scores plus ``log n_j``: one more statistics pass over
    the tiles, with no N x N map. The bias rides in one more key column (queries get a 1, keys
    ``log n_j / scale``), so the pass keeps the compiled loop; under a softcap or a
    ``score_mod`` it is added by a ``score_mod`` instead. Learned sink logits write nothing and
    leave ``a'``. A key with ``n_j = 0`` gets weight 0."""
    if value is None:
        raise ValueError("the value-weighted shares need the attention call's values")
    heads = query.shape[1]
    log_n = value_norms(module, value, heads).log()              # (H, N); -inf where n = 0
    keys = key.repeat_interleave(heads // key.shape[1], 1) if key.shape[1] != heads else key
    kw = {k: _first(v) for k, v in options.items() if k not in ("enable_gqa", "sinks")}
    dtype = torch.promote_types(query.dtype, torch.float32)
    q, k = query.detach().to(dtype), keys.detach().to(dtype)
    log_n = log_n.to(dtype)
    if kw.get("softcap") is not None or kw.get("score_mod") is not None:
        inner = kw.get("score_mod")

        def biased(s, b, h, i, j):
            return (inner(s, b, h, i, j) if inner is not None else s) + log_n[h, j]
        kw["score_mod"] = biased
    else:
        scale = kw.pop("scale", None)
        scale = (q.shape[-1] ** -0.5 if scale is None else float(scale)) \
            / float(kw.pop("temperature", 1.0))
        q = torch.cat([q, q.new_ones(*q.shape[:-1], 1)], -1)
        k = torch.cat([k, (log_n / scale).clamp_min(-3e37)[None, :, :, None]], -1)
        kw["scale"] = scale
    c = collector
    stats = attention_stats(q, k, sink_keys=c.sink_keys, sink_start=c.sink_start,
                            queries=c.real, band=c.band, ids=c.ids, **kw)
    out = {f"{name}_vw": getattr(stats, name)[0] for name in VW_FIELDS
           if getattr(stats, name) is not None}
    out["received_vw"] = stats.received[0]
    return {k: v.float().cpu() for k, v in out.items()}


def sharpest_rows(rows, sharpest: int):
    """The census's rows: those named, plus (with ``sharpest=n``) the n rows of the second
    half whose largest weight, averaged over the heads, is largest -- late rows see many keys,
    so a large top weight there is a choice, not a lack of keys. A function of the largest
    weights for :func:`attnlab.core.stats.attention_stats` (``rows=``), or the named rows
    alone (None when there are none and none are picked)."""
    if not sharpest:
        return rows
    named = torch.as_tensor([] if rows is None else rows, dtype=torch.long).reshape(-1)

    def pick(max_weight: torch.Tensor) -> torch.Tensor:
        n_q = max_weight.shape[-1]
        late = max_weight.float().mean(0)[n_q // 2:]
        late_pos = torch.arange(n_q // 2, n_q, device=late.device)
        late = torch.where(torch.isin(late_pos, named.to(late.device)), -1.0, late)
        chosen = late.topk(min(sharpest, late.numel())).indices + n_q // 2
        return torch.cat([named.to(late.device), chosen.sort().values])

    return pick


def _first(v):
    """The first sequence of a batched option (masks are per sequence; the census takes one)."""
    if isinstance(v, torch.Tensor) and v.dim() >= 3 and v.shape[0] > 1:
        return v[:1]
    return v


def input_ids_of(model, tokenizer, text, input_ids, attention_mask, inputs, is_hf):
    """``(input_ids (1, N), attention_mask or None)`` from what the census was given (text
    through the tokenizer, or ids), refusing in one line what it cannot use."""
    if input_ids is None and inputs is None:
        if tokenizer is None or not isinstance(text, str) or not text.strip():
            raise ValueError("census needs input_ids=, inputs= (a torch module's forward "
                             "arguments), or a tokenizer and a non-empty text")
        batch = tokenizer([text], return_tensors="pt", **no_special_tokens(tokenizer))
        input_ids = batch["input_ids"]
        attention_mask = batch.get("attention_mask") if attention_mask is None else attention_mask
    if input_ids is None:
        return None, None
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.shape[0] != 1:
        raise ValueError(f"census takes one sequence: input_ids of shape (1, N), got "
                         f"{tuple(input_ids.shape)}; run it once per sequence")
    if is_hf:
        limit = (getattr(model.config, "max_position_embeddings", None)
                 or getattr(model.config, "n_positions", None))
        if limit is not None and input_ids.shape[1] > limit and not rotary(model.config):
            from attnlab.integrations.registry import config_field

            field = config_field(model.config, "positions") or "max_position_embeddings"
            raise ValueError(f"the sequence has {input_ids.shape[1]} tokens, more than the "
                             f"{limit} positions of {type(model).__name__}; shorten it, or build "
                             f"the model with a larger {field}")
    if attention_mask is not None and tuple(torch.as_tensor(attention_mask).shape) != \
            tuple(input_ids.shape):
        raise ValueError(f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}, "
                         f"got {tuple(torch.as_tensor(attention_mask).shape)}")
    return input_ids, attention_mask


def real_tokens(attention_mask) -> tuple[torch.Tensor | None, int]:
    """The real tokens ``(N,)`` bool of a padded sequence (None without a mask) and the
    position of the first of them (the sink's, after left padding)."""
    if attention_mask is None:
        return None, 0
    real = torch.as_tensor(attention_mask)[0].bool()
    if not bool(real.any()):
        raise ValueError("attention_mask marks every token as padding; census needs at least "
                         "one real token")
    return real, int(real.nonzero()[0])


def rotary(config) -> bool:
    """Whether a transformers config's positions are rotary (RoPE: computed at any position,
    no table to run past; the model is then read beyond the length it was trained at)."""
    return bool(getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None))


def no_special_tokens(tokenizer) -> dict:
    """Byte tokenizers (ByT5's) append an end token that a causal LM never saw in training."""
    return {"add_special_tokens": False} if type(tokenizer).__name__.startswith("ByT5") else {}


def run_transformers(model, ah, input_ids, attention_mask) -> None:
    """Run a transformers model once on ``attnlab_tiled`` with the attention handler ``ah``
    registered (it feeds the collector), and set its attention implementation back."""
    ah.register()
    was_impl = model.config._attn_implementation
    model.set_attn_implementation("attnlab_tiled")
    try:
        kw = {"attention_mask": attention_mask} if attention_mask is not None else {}
        if _takes_cache(model):
            kw["use_cache"] = False
        model(input_ids=input_ids, **kw)
    finally:
        model.set_attn_implementation(was_impl)


def run_module(model, inputs, collector) -> None:
    """A torch module: attnlab's MultiheadAttention hands over its q and k itself; each
    ``torch.nn.MultiheadAttention`` is read by a forward pre-hook (its projections applied to
    the call's inputs, its masks in attnlab's polarity)."""
    from attnlab.inspect.capture import _torch_mha_vectors
    from attnlab.nn.multihead import to_core_mask

    handles = []
    for m in model.modules():
        if isinstance(m, torch.nn.MultiheadAttention):
            handles.append(m.register_forward_pre_hook(
                lambda mod, args, kwargs: _torch_mha(mod, args, kwargs, collector,
                                                     _torch_mha_vectors, to_core_mask),
                with_kwargs=True))
    try:
        model(*(inputs if isinstance(inputs, tuple) else (inputs,)))
    finally:
        for h in handles:
            h.remove()


_MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal")


def _torch_mha(mod, args, kwargs, collector, vectors, to_core_mask) -> None:
    call = dict(zip(_MHA_ARGS, args), **kwargs)
    got = vectors(mod, call["query"], call["key"], call["value"])
    if got is None:
        collector.skipped.append(f"{collector.names.get(id(mod), 'MultiheadAttention')} "
                                 "(add_bias_kv / add_zero_attn)")
        return
    q, k, _, _ = got
    attn_mask, kpm = call.get("attn_mask"), call.get("key_padding_mask")
    if kpm is not None and kpm.dim() == 1:
        kpm = kpm[None]
    if attn_mask is not None and attn_mask.dim() == 3:          # (B * H, N_q, N_k)
        attn_mask = attn_mask.reshape(q.shape[0], q.shape[1], *attn_mask.shape[-2:])[0]
    causal = bool(call.get("is_causal")) and attn_mask is None
    mask = to_core_mask(attn_mask, kpm, q.shape[0], q.shape[1], q.shape[2], k.shape[2],
                        q.dtype)
    collector.add(mod, q, k, {"mask": mask, "causal": causal})


def _takes_cache(model) -> bool:
    import inspect

    return "use_cache" in inspect.signature(model.forward).parameters


def tokens_of(tokenizer, ids) -> list[str]:
    """The tokens as a report shows them (the ids themselves without a tokenizer)."""
    if tokenizer is None:
        return [str(int(i)) for i in ids]
    from attnlab.inspect.tokens import display_tokens

    raw = tokenizer.convert_ids_to_tokens(ids.tolist())
    return display_tokens(tokenizer, [t if t is not None else f"<id {i}>"
                                      for i, t in zip(ids.tolist(), raw)])
