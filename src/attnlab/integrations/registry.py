"""The one place that touches transformers' registries, shared by both bridges (the
integration, :mod:`attnlab.integrations.transformers`, and the sharded models,
:mod:`attnlab.distributed.hf`): the version gate, registering names with the attention and
mask interfaces and removing them, and the names of a model's own config fields in refusals.
"""

from __future__ import annotations

# No attnlab name contains these: transformers checks such names against a model's
# ``_supports_*`` flags and refuses them on Gemma 2 and gpt-oss.
FORBIDDEN = ("sdpa", "flash", "flex")
# the config fields models name their attention dropout and their trained length by
DROPOUT_ATTRS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob",
                 "dropout_rate")
POSITION_ATTRS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len")


def config_field(config, kind: str) -> str | None:
    """The name a model's own config gives a feature (``kind``: ``"attention dropout"`` or
    ``"positions"``): GPT-2's ``attn_pdrop`` and ``n_positions`` where Llama has
    ``attention_dropout`` and ``max_position_embeddings``; None when it has none of them.
    Refusals name the field the user can set."""
    names = {"attention dropout": DROPOUT_ATTRS, "positions": POSITION_ATTRS}[kind]
    found = next((a for a in names if config is not None and hasattr(config, a)
                  and getattr(config, a) is not None), None)
    # configs alias the common names onto their own (GPT2Config's attribute_map sends
    # max_position_embeddings to n_positions): the user sets the model's own
    return getattr(config, "attribute_map", {}).get(found, found) if found else None


MIN_TRANSFORMERS = "4.48"          # AttentionInterface and AttentionMaskInterface


def interfaces():
    """transformers' ``(AttentionInterface, AttentionMaskInterface)``; an ImportError naming
    the version needed where transformers is missing or older."""
    try:
        import transformers
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as exc:
        raise ImportError(f"attnlab's transformers bridge needs transformers >= "
                          f"{MIN_TRANSFORMERS} (its AttentionInterface): {exc}") from None
    from packaging.version import Version

    if Version(transformers.__version__).release < Version(MIN_TRANSFORMERS).release:
        raise ImportError(f"attnlab's transformers bridge needs transformers >= "
                          f"{MIN_TRANSFORMERS}, found {transformers.__version__}; upgrade it")
    return AttentionInterface, AttentionMaskInterface


def add_names(makers: dict, registered: dict) -> None:
    """Register each ``name: maker`` (``maker()`` gives the attention function and the mask
    function) with transformers' attention and mask interfaces, recording it in
    ``registered``. A name already in ``registered`` is skipped; a name transformers already
    holds for something that is not attnlab's is refused (ValueError) before any change, and
    transformers' own names are never touched. Used by both bridges (this module and
    :mod:`attnlab.distributed.hf`)."""
    attention, mask = interfaces()
    todo = [n for n in makers if n not in registered]
    for name in todo:
        if any(bad in name for bad in FORBIDDEN):       # a guard for future names
            raise AssertionError(name)
        taken = attention._global_mapping.get(name)     # private: the only read of it
        if taken is not None and not getattr(taken, "__name__", "").startswith("attnlab_"):
            raise ValueError(f"attention implementation {name!r} is already registered by "
                             f"{getattr(taken, '__module__', '?')}; attnlab leaves it alone")
    for name in todo:
        fn, mask_fn = makers[name]()
        attention.register(name, fn)
        mask.register(name, mask_fn)
        registered[name] = (fn, mask_fn)


def remove_names(registered: dict) -> None:
    """Undo :func:`add_names` for every name in ``registered`` (only where transformers still
    holds attnlab's function: a name re-registered by someone else is left to them)."""
    attention, mask = interfaces()
    for name, (fn, mask_fn) in list(registered.items()):
        if attention._global_mapping.get(name) is fn:
            del attention._global_mapping[name]
        if mask._global_mapping.get(name) is mask_fn:
            del mask._global_mapping[name]
        del registered[name]
