"""Run, train and generate with any Hugging Face transformers model on attnlab's backends.

    from attnlab.integrations import transformers as attnlab_hf

    attnlab_hf.register()                      # once per process; idempotent
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="attnlab_tiled")
    model.set_attn_implementation("attnlab")   # or switch a loaded model

Every name goes through transformers' own attention interface (``AttentionInterface``) with a
mask function registered under the same name (``AttentionMaskInterface``): without one,
transformers builds no padding mask at all for a name it does not know.

=========================  ===========================  ======================================
name                       attnlab backend              mask it receives
=========================  ===========================  ======================================
``attnlab``                ``auto`` (exact ones only)   eager's float mask (0 / dtype min)
``attnlab_reference``      ``reference``                eager's float mask
``attnlab_tiled``          ``tiled``                    eager's float mask
``attnlab_fused``          ``sdpa`` (torch's kernels)   eager's float mask
``attnlab_blocksparse``    ``blocksparse``              a bool mask (True = may attend)
``attnlab_triton``         ``triton`` (CUDA)            a bool mask
``attnlab_triton_blocksparse`` ``triton_blocksparse``   a bool mask
=========================  ===========================  ======================================

No name contains ``sdpa``, ``flash`` or ``flex``: transformers checks such names against a
model's ``_supports_*`` flags and refuses them on Gemma 2 and gpt-oss.

Where a batch has no padding and the mask is transformers' plain causal or sliding-window one,
the mask function builds nothing (it returns None, as transformers' sdpa does for causal) and
the call passes ``causal`` / ``window`` to the backend: a sliding-window model runs on the band
path of ``blocksparse`` without any N x N tensor. The blocksparse names run a call that has no
structure at all (one query while decoding, an encoder without padding: nothing to skip) on
``auto``. With padding, the float-mask names compute
exactly what eager attention computes (rows that see only padding included: eager's uniform
average, through the dtype's minimum); the bool-mask names give those rows 0, attnlab's
fully-masked-row contract. Either way, rows under a huge additive mask get the formula's
gradient (see :mod:`attnlab.core.backends.tiled`).

Causality follows transformers' rule exactly (that of its ``sdpa`` implementation): the call's
``is_causal`` or else the module's ``is_causal`` attribute (True when the module has none),
applied only without a mask and with more than one query; keys past the queries of an empty
static cache are dropped (its causal mask is top-left). ``scaling``, ``dropout``, ``softcap``
(Gemma 2), T5's additive ``position_bias`` (trainable: tiled and reference return its
gradient), grouped-query K/V and per-head sinks (``s_aux`` / ``sinks``, gpt-oss) are honoured;
packed-sequence options are refused. Attention weights are returned only when the model is
asked for them (``output_attentions=True``), from a backend that computes them.
"""

from __future__ import annotations

import contextlib

import torch

from attnlab.core.api import attention
from attnlab.core.registry import list_backends
from attnlab.integrations.calls import (
    UnsupportedAttentionOption,
    causal_and_window,
    make_mask,
    packed_segments,
)
from attnlab.integrations.registry import (
    DROPOUT_ATTRS,
    add_names,
    interfaces,
    remove_names,
)
from attnlab.nn import recording

# name -> (attnlab backend, mask style)
NAMES: dict[str, tuple[str, str]] = {
    "attnlab": ("auto", "float"),
    "attnlab_reference": ("reference", "float"),
    "attnlab_tiled": ("tiled", "float"),
    "attnlab_fused": ("sdpa", "float"),
    "attnlab_blocksparse": ("blocksparse", "bool"),
    "attnlab_triton": ("triton", "bool"),
    "attnlab_triton_blocksparse": ("triton_blocksparse", "bool"),
}
# What inspect's and diagnose's recorders use: auto (the reference while weights are recorded)
# with the mask of the model's own implementation, so recording never changes what it computes.
RECORD_NAMES: dict[str, tuple[str, str]] = {
    "attnlab_record": ("auto", "bool"),               # for sdpa models (and the rest)
    "attnlab_record_eager": ("auto", "float"),        # for eager models
}
# Backends that exist to skip what a structure excludes; a call with no structure at all runs on
# auto instead (a single query while decoding, an encoder without padding).
_SKIPPERS = ("blocksparse", "triton_blocksparse")

# Options transformers passes that carry no attention semantics (the model's bookkeeping).
_BOOKKEEPING = frozenset({
    "output_attentions", "output_hidden_states", "use_cache", "return_dict", "position_ids",
    "cache_position", "past_key_values", "past_key_value", "layer_idx", "deterministic",
    "num_items_in_batch", "query_length", "key_length", "position_embeddings",
    "output_router_logits", "token_type_ids", "sliding_window",
})
# Options that change what attention computes and that attnlab cannot honour: refused.
_UNSUPPORTED = ("indices", "block_indices", "seq_idx")
# Padding-free batches (transformers' DataCollatorWithFlattening, flash-attention kwargs):
# sequences packed along one row, delimited by cumulative lengths. Honoured as a
# block-diagonal (document) mask; the max lengths are bookkeeping.
_PACKED = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
# Model features, as a transformers user knows them, that a backend may not serve.


def _weights_wanted(kwargs) -> bool:
    """Whether the model is collecting attention weights (``output_attentions=True``)."""
    if kwargs.get("output_attentions"):
        return True
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:                          # an older transformers: passes the flag
        return False
    wanted = _active_collector.get() or {}
    return "attentions" in wanted or "cross_attentions" in wanted


def make_attention(backend: str):
    """transformers' attention-interface function computed by attnlab's ``backend``."""

    def attnlab_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                          is_causal=None, softcap=None, sliding_window=None, position_bias=None,
                          s_aux=None, sinks=None, **kwargs):
        return _attention(backend, module, query, key, value, attention_mask, scaling, dropout,
                          is_causal, softcap, sliding_window, position_bias,
                          s_aux if s_aux is not None else sinks, kwargs)

    attnlab_attention.__name__ = f"attnlab_{backend}_attention"
    attnlab_attention.__doc__ = (f"transformers' attention interface on attnlab's {backend!r} "
                                 "backend (see attnlab.integrations.transformers).")
    return attnlab_attention


def _attention(backend, module, query, key, value, mask, scaling, dropout, is_causal, softcap,
               sliding_window, position_bias, sink, kwargs):
    """``query (B, H_q, N_q, D)``, ``key, value (B, H_kv, N_k, D)`` -> ``(B, N_q, H_q, D_v)``
    and the weights ``(B, H_q, N_q, N_k)`` or None."""
    for name in _UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise UnsupportedAttentionOption(
                f"{type(module).__name__} passed {name}=, which attnlab does not reproduce; "
                "pass a padded batch with an attention_mask, or packed sequences with "
                "position_ids or cu_seq_lens_q / cu_seq_lens_k")
    unknown = sorted(k for k, v in kwargs.items()
                     if v is not None and k not in _BOOKKEEPING and k not in _UNSUPPORTED
                     and k not in _PACKED)
    if unknown:
        raise UnsupportedAttentionOption(
            f"{type(module).__name__} passed attention option(s) {', '.join(unknown)} that "
            "attnlab does not know, so its result could differ from the model's; use a "
            "transformers version whose options attnlab knows, or report the option")
    listening = recording.listening()
    want = listening or _weights_wanted(kwargs)
    n_q, n_k = query.shape[2], key.shape[2]
    if mask is not None:
        mask = mask[..., :n_k]
        if mask.dtype != torch.bool:
            mask = mask.to(query.dtype)                      # additive: 0 or a large negative
    causal, window = causal_and_window(module, is_causal, sliding_window, n_q,
                                       masked=mask is not None)
    n_used = n_k
    if causal and n_k > n_q:          # an empty static cache: its causal mask is top-left
        n_used = n_q
        key, value = key[:, :, :n_q], value[:, :, :n_q]
        if position_bias is not None:
            position_bias = position_bias[..., :n_q]
    if position_bias is not None:
        bias = position_bias.to(query.dtype)
        if mask is None:
            mask = bias
        elif mask.dtype == torch.bool:
            mask = bias.masked_fill(~mask, float("-inf"))
        else:
            mask = bias + mask
    if sink is not None:
        sink = sink.to(query.dtype)
    packed = packed_segments(module, kwargs, n_q, n_used)
    if packed is not None:
        seg_q, seg_k = packed
        if mask is None:                                  # a mask function: nothing N x N
            from attnlab import masks

            mask = masks.segments(seg_q, seg_k)
        else:                                             # transformers' own mask as well
            same = seg_q[:, None] == seg_k[None, :]
            mask = mask & same if mask.dtype == torch.bool else \
                mask.masked_fill(~same, torch.finfo(mask.dtype).min)
    if backend in _SKIPPERS and mask is None and not causal and window is None:
        backend = "auto"                  # nothing to skip in this call (see the module doc)
    if want and backend not in ("auto", "reference") and \
            not list_backends()[backend].capabilities.weights:
        if listening:
            backend = "reference"
        else:
            raise ValueError(
                f"output_attentions=True asks for the attention weights, which attnlab's "
                f"{backend!r} backend does not compute; use attn_implementation='attnlab' "
                "(auto picks a backend that returns them) or 'attnlab_reference'")
    collector = recording.census()
    fused = None
    if collector is not None:                    # attnlab.inspect.census: statistics, no map
        # the statistics' first pass is the tiled forward; where it can, it serves the call
        fused = collector.add(module, query, key, dict(
            mask=mask, causal=causal, window=window, scale=scaling, softcap=softcap,
            sinks=sink, enable_gqa=query.shape[1] != key.shape[1]),
            value=value if not (want or dropout) else None)
    if fused is not None:
        out, weights = fused, None
    else:
        if backend != "auto":
            _refuse_in_model_terms(backend, module, query, mask, dropout, softcap, sink,
                                   position_bias)
        res = attention(query, key, value, mask=mask, causal=causal, window=window,
                        scale=scaling, softcap=softcap, sinks=sink,
                        enable_gqa=query.shape[1] != key.shape[1], dropout_p=dropout,
                        backend=backend, return_weights=want)
        out, weights = (res.out, res.weights) if want else (res, None)
    if weights is not None and n_used < n_k:
        weights = torch.nn.functional.pad(weights, (0, n_k - n_used))
    if listening:
        g = query.shape[1] // key.shape[1]
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        vectors = (query.detach(), key.detach().repeat_interleave(g, 1),
                   value.detach().repeat_interleave(g, 1), float(scale))
        recording.report(module, weights, vectors)
    return out.transpose(1, 2).contiguous(), weights        # (B, N, H, D), (B, H, N, N)


def _model_name(module) -> str:
    config = getattr(module, "config", None)
    kind = getattr(config, "model_type", None)
    return {"gpt2": "GPT-2", "bert": "BERT", "t5": "T5", "gemma2": "Gemma 2",
            "gpt_oss": "gpt-oss", "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2",
            "bart": "BART"}.get(kind, kind or type(module).__name__)


def _name_of(backend: str) -> str:
    return next(n for n, (b, _) in NAMES.items() if b == backend)


def _dropout_words(module, p: float) -> str:
    config = getattr(module, "config", None)
    for attr in DROPOUT_ATTRS:
        if config is not None and getattr(config, attr, None) == p:
            return f"{_model_name(module)}'s {attr} = {p}"
    return f"{_model_name(module)}'s attention dropout p = {p}"


def _refuse_in_model_terms(backend, module, query, mask, dropout, softcap, sink, bias):
    """Refuse, in a transformers user's words, a call the named backend cannot serve: the
    model feature (with its config attribute) and the implementation names that serve it."""
    name, caps = _name_of(backend), list_backends()[backend].capabilities
    model = _model_name(module)
    serve = "use attn_implementation='attnlab' (it picks a backend that can) or 'attnlab_tiled'"
    problem = None
    if backend.startswith("triton") and query.device.type != "cuda":
        from attnlab.core.backends import gpu

        if not gpu._interpreted():
            problem = (f"{name} runs Triton kernels on CUDA tensors and this {model} model is "
                       f"on {query.device.type}")
    if problem is None and dropout > 0 and not caps.dropout:
        problem = f"{_dropout_words(module, dropout)} needs attention dropout in training"
        serve += " (or train with that dropout set to 0.0, or evaluate with model.eval())"
    elif problem is None and softcap is not None and not caps.softcap:
        problem = (f"{model}'s attn_logit_softcapping = {softcap} needs a soft cap on the "
                   "scores")
    elif problem is None and sink is not None and not caps.lse:
        problem = (f"{model}'s attention sinks are merged from the log-sum-exp, which {name} "
                   "does not return")
    elif problem is None and bias is not None and "float" not in caps.masks:
        problem = f"{model}'s relative position bias is an additive float mask"
    elif problem is None and mask is not None and isinstance(mask, torch.Tensor) and \
            ("bool" if mask.dtype == torch.bool else "float") not in caps.masks:
        problem = (f"a batch with padding (attention_mask zeros) reaches {name} as a "
                   f"{'bool' if mask.dtype == torch.bool else 'float'} mask tensor")
    if problem is not None:
        raise UnsupportedAttentionOption(
            f"attn_implementation={name!r} cannot serve this {model} model: {problem}, which "
            f"attnlab's {backend!r} backend does not compute; {serve}")


def check(model, name: str | None = None, *, training: bool | None = None) -> None:
    """Refuse now, in the model's terms, an implementation name that cannot serve ``model``.

    transformers calls nothing of a registered implementation when a model is loaded or
    switched (it only checks that the name exists), so without this the refusal comes at the
    first forward. ``name``: default the model's current implementation; ``training``: judge
    attention dropout as in training (default: ``model.training``). Raises
    :class:`UnsupportedAttentionOption`; returns None when the name serves the model."""
    name = name or model.config._attn_implementation
    if name not in NAMES:
        raise ValueError(f"name must be one of {', '.join(NAMES)}, got {name!r}")
    backend = NAMES[name][0]
    if backend == "auto":
        return
    config = model.config
    training = model.training if training is None else training
    p = next((float(getattr(config, a)) for a in DROPOUT_ATTRS
              if isinstance(getattr(config, a, None), (int, float))
              and getattr(config, a) > 0), 0.0)
    softcap = getattr(config, "attn_logit_softcapping", None)
    sink = torch.zeros(1) if config.model_type == "gpt_oss" else None
    bias = torch.zeros(1) if getattr(config, "relative_attention_num_buckets", None) else None
    probe = torch.empty(0, device=next(model.parameters()).device)

    class _Module:                                   # what the call-time check reads
        pass

    module = _Module()
    module.config = config
    _refuse_in_model_terms(backend, module, probe, None, p if training else 0.0, softcap, sink,
                           bias)


_REGISTERED: dict[str, tuple] = {}


def register(names=None) -> list[str]:
    """Register attnlab's names with transformers' attention and mask interfaces.

    Args:
        names: which of :data:`NAMES` (default: all of them, and the recorders'
            :data:`RECORD_NAMES`). Registering again is a no-op.

    Returns:
        the names now registered. Raises ``ValueError`` if one of them is already taken by
        something other than attnlab (nothing of transformers' own names is touched).
    """
    interfaces()                                    # the version gate, before any change
    table = {**NAMES, **RECORD_NAMES}
    chosen = list(table) if names is None else list(names)
    unknown = [n for n in chosen if n not in table]
    if unknown:
        raise ValueError(f"names must be among {', '.join(table)}, got {unknown}")
    # The Triton names exist only where their kernels can run (a CUDA GPU with triton, or
    # Triton's interpreter), so that a model set to one fails at set_attn_implementation /
    # from_pretrained (transformers: "not supported") instead of at its first forward.
    from attnlab.core.backends import gpu

    no_gpu = gpu._here()
    if no_gpu is not None:
        asked = [n for n in chosen if table[n][0].startswith("triton")]
        if names is not None and asked:
            raise ValueError(f"{', '.join(asked)} cannot be registered here: {no_gpu}; use "
                             "'attnlab' or 'attnlab_tiled' on this machine")
        chosen = [n for n in chosen if not table[n][0].startswith("triton")]
    add_names({name: (lambda name=name: (make_attention(table[name][0]),
                                         make_mask(table[name][1]))) for name in chosen},
              _REGISTERED)
    return [n for n in table if n in _REGISTERED]


def unregister() -> None:
    """Remove every name :func:`register` added (transformers' own names are untouched)."""
    remove_names(_REGISTERED)


def is_transformers_model(model) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (without importing transformers'
    modeling code, 5 s, to learn that a model is not one)."""
    import sys

    modeling = sys.modules.get("transformers.modeling_utils")
    return modeling is not None and isinstance(model, modeling.PreTrainedModel)


def record_name(model) -> str:
    """The recording name whose mask matches ``model``'s own implementation."""
    return "attnlab_record_eager" if model.config._attn_implementation == "eager" \
        else "attnlab_record"


@contextlib.contextmanager
def recorded(model):
    """While the block runs, ``model``'s attention goes where inspect's and diagnose's recorders
    read it, and comes back after: a transformers model on its record name
    (:data:`RECORD_NAMES`, with the mask of its own implementation, so nothing it computes
    changes), torch's ``MultiheadAttention`` off its fast path (which skips the module's
    forward, where the hooks are)."""
    prev = None
    if is_transformers_model(model):
        register(list(RECORD_NAMES))
        prev = model.config._attn_implementation
        model.set_attn_implementation(record_name(model))
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
        if prev is not None:
            model.set_attn_implementation(prev)
