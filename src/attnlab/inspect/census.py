"""The census of a model: every head's attention statistics at every position, in memory
linear in the sequence length, and a label per head.

    from attnlab.inspect import census
    c = census(model, tokenizer, text)            # any transformers encoder or decoder
    c.summary["sink_mass"]                        # (L, H): each head's mean
    c.labels[layer][head]                         # "sink", "previous token", "induction", ...

Inside transformers' attention call (through :mod:`attnlab.integrations.transformers`, so
from the post-RoPE q and k with the call's own masks), each layer's
:func:`attnlab.core.stats.attention_stats` is taken: no N x N map is ever formed. The model
runs on ``attnlab_tiled`` meanwhile and is set back afterwards.

Labels at long context, first match wins, with their thresholds:

* **induction**: mean ``match_mass`` above 0.5 over the queries whose token occurred before
  (Olsson et al. 2022's prefix-matching score; they rank heads without a cut-off: 0.5 is
  attnlab's, as in :mod:`attnlab.inspect.taxonomy`);
* **sink**: mean mass on the first ``sink_keys`` tokens above 0.3 (Gu et al. 2024's sink
  metric with epsilon = 0.3);
* **previous token**: mean mass on the previous token above 0.5 (Clark et al. 2019);
* **local**: mean mass within ``band`` positions above 0.8 (attnlab's threshold);
* **broad**: mean entropy at least 80% of the uniform entropy over the keys a query sees
  (attnlab's threshold, as in the taxonomy);
* **mixed**: none of these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnlab.core.stats import ROW_FIELDS, attention_stats

SINK = 0.3            # Gu et al. 2024, epsilon
INDUCTION = 0.5       # attnlab's cut on Olsson et al.'s prefix-matching score
PREVIOUS = 0.5        # Clark et al. 2019
LOCAL = 0.8           # attnlab's
BROAD = 0.8           # attnlab's, as the taxonomy's broad heads
LABELS = ("induction", "sink", "previous token", "local", "broad", "mixed")


@dataclass
class Census:
    """Per-position statistics ``stats[name] (L, H, N)`` (``received``: per key), per-head
    means ``summary[name] (L, H)`` over the positions that see a key, labels ``(L, H)``, the
    tokens and the settings."""

    model: str
    tokens: list[str]
    stats: dict[str, torch.Tensor]
    summary: dict[str, torch.Tensor]
    labels: list[list[str]]
    sink_keys: int
    band: int
    notes: list[str] = field(default_factory=list)

    @property
    def layers(self) -> int:
        """Number of layers (attention calls seen)."""
        return len(self.labels)

    @property
    def heads(self) -> int:
        """Number of query heads per layer."""
        return len(self.labels[0]) if self.labels else 0

    def counts(self) -> dict[str, int]:
        """How many heads carry each label."""
        flat = [x for row in self.labels for x in row]
        return {name: flat.count(name) for name in LABELS if name in flat}


class _Collector:
    """What the integration hands over per attention call: one statistics record per layer."""

    def __init__(self, ids, sink_keys: int, band: int):
        self.ids, self.sink_keys, self.band = ids, sink_keys, band
        self.layers: list[tuple[object, dict, bool]] = []

    def add(self, module, query, key, options) -> None:
        n_q, n_k = query.shape[2], key.shape[2]
        ids = self.ids if (self.ids is not None and n_q == n_k == self.ids.numel()) else None
        stats = attention_stats(query[:1].detach(), key[:1].detach(), sink_keys=self.sink_keys,
                                band=self.band, ids=ids,
                                **{k: _first(v) for k, v in options.items()})
        causal = bool(options.get("causal")) or getattr(module, "is_causal", False)
        self.layers.append((module, stats, causal))


def _first(v):
    """The first sequence of a batched option (masks are per sequence; the census takes one)."""
    if isinstance(v, torch.Tensor) and v.dim() == 4 and v.shape[0] > 1:
        return v[:1]
    return v


def census(model, tokenizer=None, text: str | None = None, *, input_ids=None,
           attention_mask=None, sink_keys: int = 1, band: int = 16,
           name: str | None = None) -> Census:
    """The census of a transformers encoder or decoder on one sequence.

    Args:
        model: a transformers model (encoder such as BERT, or decoder: GPT-2, Llama, ...).
        tokenizer, text: the sequence as text; or ``input_ids`` ``(1, N)`` (with its
            ``attention_mask`` for a padded sequence).
        sink_keys, band: what counts as the sink and as local (see
            :func:`attnlab.core.stats.attention_stats`).
    """
    from attnlab.integrations import transformers as ah
    from attnlab.nn import _recording

    if not ah.is_transformers_model(model):
        raise TypeError(f"census takes a transformers model, got {type(model).__name__}; "
                        "for attnlab's own modules use attnlab.attention_stats on their q, k")
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"census takes an encoder or a decoder; {type(model).__name__} is an "
                         "encoder-decoder (inspect.show shows its three kinds of maps)")
    if input_ids is None:
        if tokenizer is None or not isinstance(text, str) or not text.strip():
            raise ValueError("census needs input_ids=, or a tokenizer and a non-empty text")
        batch = tokenizer([text], return_tensors="pt")
        input_ids = batch["input_ids"]
        attention_mask = batch.get("attention_mask") if attention_mask is None else attention_mask
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.shape[0] != 1:
        raise ValueError(f"census takes one sequence: input_ids of shape (1, N), got "
                         f"{tuple(input_ids.shape)}; run it once per sequence")
    limit = (getattr(model.config, "max_position_embeddings", None)
             or getattr(model.config, "n_positions", None))
    if limit is not None and input_ids.shape[1] > limit:
        raise ValueError(f"the sequence has {input_ids.shape[1]} tokens, more than the {limit} "
                         f"positions of {type(model).__name__}; shorten it, or build the model "
                         "with a larger max_position_embeddings")
    if attention_mask is not None and tuple(torch.as_tensor(attention_mask).shape) != \
            tuple(input_ids.shape):
        raise ValueError(f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}, "
                         f"got {tuple(torch.as_tensor(attention_mask).shape)}")
    ah.register()
    ids = input_ids[0]
    collector = _Collector(ids, sink_keys, band)
    was_impl, was_training = model.config._attn_implementation, model.training
    model.set_attn_implementation("attnlab_tiled")
    model.eval()
    token = _recording.push_census(collector)
    try:
        with torch.no_grad():
            kw = {"attention_mask": attention_mask} if attention_mask is not None else {}
            model(input_ids=input_ids, use_cache=False, **kw) if _takes_cache(model) else \
                model(input_ids=input_ids, **kw)
    finally:
        _recording.pop_census(token)
        model.set_attn_implementation(was_impl)
        model.train(was_training)
    if not collector.layers:
        raise ValueError(f"{type(model).__name__} made no attention call through "
                         "transformers' attention interface; census cannot see its heads")
    tokens = _tokens(tokenizer, ids)
    return _assemble(collector, ids, tokens, name or type(model).__name__, sink_keys, band)


def _takes_cache(model) -> bool:
    import inspect

    return "use_cache" in inspect.signature(model.forward).parameters


def _tokens(tokenizer, ids) -> list[str]:
    if tokenizer is None:
        return [str(int(i)) for i in ids]
    from attnlab.inspect.tokens import display_tokens

    raw = tokenizer.convert_ids_to_tokens(ids.tolist())
    return display_tokens(tokenizer, [t if t is not None else f"<id {i}>"
                                      for i, t in zip(ids.tolist(), raw)])


def _assemble(collector, ids, tokens, name, sink_keys, band) -> Census:
    stats: dict[str, torch.Tensor] = {}
    for field_name in (*ROW_FIELDS, "received"):
        per_layer = [getattr(s, field_name) for _, s, _ in collector.layers]
        if any(t is None for t in per_layer):
            continue
        stats[field_name] = torch.stack([t[0] for t in per_layer]).cpu()      # (L, H, N)
    seen = torch.isfinite(stats["lse"])                                        # rows with keys
    summary = {}
    for field_name, t in stats.items():
        if field_name in ("lse", "argmax", "received"):
            continue
        values = torch.where(seen, t.float(), torch.zeros_like(t, dtype=torch.float32))
        summary[field_name] = values.sum(-1) / seen.sum(-1).clamp_min(1)
    n = ids.numel()
    causal = [c for _, _, c in collector.layers]
    # the uniform entropy over the keys each query sees: ln(i + 1) causal, ln N otherwise
    pos = torch.arange(n, dtype=torch.float32)
    uniform = torch.stack([torch.log(pos + 1).clamp_min(math.log(2)) if c
                           else torch.full((n,), math.log(max(n, 2))) for c in causal])
    norm = stats["entropy"].float() / uniform[:, None, :]
    summary["entropy_ratio"] = torch.where(seen, norm, torch.zeros_like(norm)).sum(-1) \
        / seen.sum(-1).clamp_min(1)
    if "match_mass" in stats:                   # induction over the queries that can match
        earlier = _has_earlier_match(ids)
        keep = seen & earlier[None, None, :]
        summary["induction"] = torch.where(keep, stats["match_mass"].float(), 0.0).sum(-1) \
            / keep.sum(-1).clamp_min(1)
    labels = [[_label(summary, layer, head) for head in range(stats["lse"].shape[1])]
              for layer in range(stats["lse"].shape[0])]
    return Census(name, tokens, stats, summary, labels, sink_keys, band)


def _has_earlier_match(ids: torch.Tensor) -> torch.Tensor:
    """Whether query i has a key j <= i whose previous token is ids[i] (prefix matching)."""
    seen, out = set(), []
    prev = None
    for tok in ids.tolist():
        if prev is not None:
            seen.add(prev)
        out.append(tok in seen)
        prev = tok
    return torch.tensor(out)


def _label(summary, layer: int, head: int) -> str:
    def at(name):
        t = summary.get(name)
        return float(t[layer, head]) if t is not None else 0.0

    if at("induction") > INDUCTION:
        return "induction"
    if at("sink_mass") > SINK:
        return "sink"
    if at("prev_mass") > PREVIOUS:
        return "previous token"
    if at("local_mass") > LOCAL:
        return "local"
    if at("entropy_ratio") >= BROAD:
        return "broad"
    return "mixed"
