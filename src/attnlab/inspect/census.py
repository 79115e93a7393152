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

Labels come from the one rule table that full maps use too (:mod:`attnlab.inspect.labels`,
with every threshold and its source), applied to the same per-head means
(:func:`attnlab.inspect.labels.summarize`): the same head of the same text gets the same label
at 1,000 tokens through ``show()`` and through the census.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab._threads import uses_spare_threads
from attnlab.core.stats import ROW_FIELDS
from attnlab.inspect import labels as table
from attnlab.inspect.collect import (
    Collector,
    input_ids_of,
    real_tokens,
    run_module,
    run_transformers,
    tokens_of,
)
from attnlab.inspect.labels import LABELS
from attnlab.inspect.tokens import reading_pieces


@dataclass
class Census:
    """Per-position statistics ``stats[name] (L, H, N)`` (``received``: per key), per-head
    means ``summary[name] (L, H)`` over the positions that see a key, labels ``(L, H)``, the
    tokens (and ``pieces``: each token as the text it adds when read in order, its spacing
    included, for the report's contexts; :func:`~attnlab.inspect.tokens.reading_pieces`) and
    the settings. With ``pooled=`` also ``maps["mean"|"max"] (L, H, G, G)``, and
    ``rows`` ``{layer: (row_index (R,), weights (H, R, N))}``: exact rows of named queries and
    of each layer's sharpest late rows."""

    model: str
    tokens: list[str]
    stats: dict[str, torch.Tensor]
    summary: dict[str, torch.Tensor]
    labels: list[list[str]]
    sink_keys: int
    band: int
    notes: list[str] = field(default_factory=list)
    layer_names: list[str] = field(default_factory=list)
    maps: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # past the positions the model was trained at: the labels and means above are those of the
    # queries before ``trained``; these are the same of the queries from it on
    trained: int | None = None
    summary_past: dict[str, torch.Tensor] = field(default_factory=dict)
    labels_past: list[list[str]] = field(default_factory=list)
    causal: list[bool] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    importance: object = None          # an inspect.importance.HeadImportance, where asked

    @property
    def layers(self) -> int:
        """Number of layers (attention calls seen)."""
        return len(self.labels)

    @property
    def heads(self) -> int:
        """Number of query heads per layer."""
        return len(self.labels[0]) if self.labels else 0

    @property
    def length(self) -> int:
        """Number of positions."""
        return len(self.tokens)

    def table(self):
        """One row per head: layer, head, label and every per-head mean (a pandas DataFrame;
        :data:`attnlab.inspect.labels.TABLE_COLUMNS` gives the columns, ``UNITS`` their units). Past
        the trained length, ``label_past`` and ``<statistic>_past`` beside them: the same of
        the queries from ``trained`` on."""
        out = table.head_table(self.labels, self.summary)
        if self.trained is not None:
            past = table.head_table(self.labels_past, self.summary_past)
            for name in past.columns[2:]:
                out[f"{name}_past"] = past[name].values
        return out

    def relabel(self, **statistics) -> "Census":
        """Attach per-head statistics measured elsewhere (``retrieval_score=`` from
        :func:`attnlab.inspect.retrieval.needle_test`: ``(L, H)``) and label the heads again
        by the one table; returns the census."""
        for name, values in statistics.items():
            values = torch.as_tensor(values, dtype=torch.float32)
            if tuple(values.shape) != (self.layers, self.heads):
                raise ValueError(f"{name} must be ({self.layers}, {self.heads}), one value per "
                                 f"head, got {tuple(values.shape)}")
            self.summary[name] = values
        self.labels = table.label_heads(self.summary)
        return self

    def changes(self) -> list[str]:
        """Past the trained length, each head whose label changes there, or whose positional
        label (local, previous / next token, self) holds while its mean distance more than
        doubles, in words ("L0H0: local below 4,096 (reads 167 tokens back), heterogeneous
        above it (1,070 back)"). A broad head reading further back later in a text is what
        broad means, and is not listed."""
        if self.trained is None:
            return []
        out = []
        d_in, d_out = self.summary["distance"], self.summary_past["distance"]
        for layer in range(self.layers):
            for head in range(self.heads):
                a, b = self.labels[layer][head], self.labels_past[layer][head]
                x, y = float(d_in[layer, head]), float(d_out[layer, head])
                positional = a in ("local", "previous token", "next token", "self")
                if a != b or (positional and y > 2 * max(x, 1.0)):
                    out.append(f"L{layer}H{head}: {a} below {self.trained:,} (reads {x:,.0f} "
                               f"tokens back), {b} above it ({y:,.0f} back)")
        return out

    def compare(self, other: "Census", names=("a", "b")):
        """This census beside ``other`` (the same heads: the same text at 1k and at 16k
        tokens, say), one row per head: both labels, whether it changed, both values of every
        statistic and their difference (see :func:`attnlab.inspect.labels.compare_tables`)."""
        return table.compare_tables(self.table(), other.table(), names)

    def counts(self) -> dict[str, int]:
        """How many heads carry each label."""
        flat = [x for row in self.labels for x in row]
        return {name: flat.count(name) for name in LABELS if name in flat}

    def save(self, path, settings: dict[str, str] | None = None):
        """Write the census report, a standalone offline HTML page (temporary name, then
        rename); returns its path."""
        from attnlab.inspect.report.census import write_census

        return write_census(self, path, settings)

    def _repr_html_(self) -> str:
        from attnlab.inspect.report.census import render_census

        return render_census(self, inline=True)


_ATTENTION = (torch.nn.MultiheadAttention,)


@uses_spare_threads
def census(model, tokenizer=None, text: str | None = None, *, input_ids=None,
           attention_mask=None, inputs=None, sink_keys: int = 1, band: int = 16,
           pooled: int | None = None, rows=None, sharpest: int = 0,
           name: str | None = None, trained: int | None = None,
           importance: bool | tuple[int, int] = False,
           value_weighted: bool = False) -> Census:
    """The census of a model's self-attention on one sequence.

    Args:
        model: ``"kjv"`` or ``"smollm2"`` (a zoo language model, with its tokenizer), or a
            transformers encoder or decoder (BERT, GPT-2, Llama, ...; computed inside
            transformers' attention call from the post-RoPE q and k), or any torch module whose
            attention is attnlab's :class:`~attnlab.nn.MultiheadAttention` or
            ``torch.nn.MultiheadAttention``.
        tokenizer, text: the sequence as text; or ``input_ids`` ``(1, N)`` (with its
            ``attention_mask`` for a padded sequence, transformers models).
        inputs: for a torch module that does not take ``input_ids``: the positional
            argument(s) of its forward (a tensor or a tuple); ``input_ids`` then only name
            the tokens (for ``match_mass``).
        sink_keys, band: what counts as the sink and as local (see
            :func:`attnlab.core.stats.attention_stats`).
        pooled, rows, sharpest: also the pooled maps (side ``pooled``), the exact weight rows
            of the queries ``rows`` and of each layer's ``sharpest`` late rows.
        trained: the length the model was trained at (default: a transformers config's
            ``max_position_embeddings``). A longer sequence's heads are labelled on the queries
            before it; their statistics from it on come beside (``summary_past``,
            ``labels_past``, :meth:`Census.changes`).
        importance: also every head's importance for the loss of the text (or of the target
            span ``(start, end)``), from one backward on the tiled backend
            (:func:`attnlab.inspect.importance.head_gradients`): ``Census.importance``, the
            ``importance`` column of :meth:`Census.table` and the report's "What matters",
            with each token's relevance from the same backward
            (``Census.importance.token_relevance()``). Transformers causal language models
            only.
        value_weighted: also each head's value-weighted shares (Kobayashi et al. 2020): of
            ``sum_j a_ij ||v_j W_O^h||``, the part on the sink keys, the previous key, the key
            itself, the band and the prefix-matching keys (``sink_mass_vw``, ``prev_mass_vw``,
            ``self_mass_vw``, ``local_mass_vw``, ``match_mass_vw``), and the value-weighted
            attention each key receives (``stats["received_vw"]``): one more statistics pass
            per layer (:func:`attnlab.inspect.collect.value_weighted_shares`). Transformers
            models whose attention has a per-head output projection (``o_proj``,
            ``out_proj``, ``c_proj`` or ``o``); others are refused, since without ``W_O`` a
            key's norm would be its value's, which is not what the head writes.
    """
    from attnlab.integrations import transformers as ah
    from attnlab.nn import recording

    if isinstance(tokenizer, str):
        if text is None and isinstance(model, str):   # census("smollm2", "the text")
            text, tokenizer = tokenizer, None
        else:
            raise TypeError("tokenizer must be a tokenizer, got a str; pass the text as "
                            "text=: census(model, tokenizer, text='...'), or "
                            "census('smollm2', '...') for a zoo model")
    if isinstance(model, str):                     # a zoo language model by name
        from attnlab import zoo

        if model not in zoo.LANGUAGE_MODELS:
            raise ValueError(f"census takes a model, or the name of a zoo language model "
                             f"({', '.join(zoo.LANGUAGE_MODELS)}); got {model!r}")
        name = name or model
        model, named_tok = zoo.load_lm(model)
        tokenizer = tokenizer if tokenizer is not None else named_tok
    is_hf = ah.is_transformers_model(model)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"census takes a torch module (a transformers model, or one built from "
                        f"attnlab's or torch's MultiheadAttention), got {type(model).__name__}")
    if not is_hf and not any(isinstance(m, _ATTENTION) or
                             type(m).__name__ == "MultiheadAttention" for m in model.modules()):
        raise TypeError(f"census takes a transformers model or a module with attnlab's or "
                        f"torch's MultiheadAttention; {type(model).__name__} has neither")
    if is_hf and getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"census takes an encoder or a decoder; {type(model).__name__} is an "
                         "encoder-decoder (inspect.show shows its three kinds of maps)")
    input_ids, attention_mask = input_ids_of(model, tokenizer, text, input_ids, attention_mask,
                                           inputs, is_hf)
    if importance is not False:                  # refused before the census runs
        _check_importance(model, is_hf, input_ids, importance)
    names = {id(m): n or type(m).__name__ for n, m in model.named_modules()}
    ids = input_ids[0] if input_ids is not None else None
    real, sink_start = real_tokens(attention_mask)
    if value_weighted and not is_hf:
        raise ValueError(f"value_weighted= needs a transformers model (the values and W_O of "
                         f"its attention call); {type(model).__name__} is not one")
    if value_weighted:
        from attnlab.inspect.ablation import attention_modules

        attention_modules(model)             # refuses a model without W_O, before the run
    collector = Collector(ids, sink_keys, band, names, pooled, rows, sharpest, real, sink_start,
                          value_weighted=bool(value_weighted))
    was_training = model.training
    model.eval()
    token = recording.push_census(collector)
    try:
        with torch.no_grad():
            if is_hf:
                run_transformers(model, ah, input_ids, attention_mask)
            else:
                run_module(model, input_ids if inputs is None else inputs, collector)
    finally:
        recording.pop_census(token)
        model.train(was_training)
    if not collector.layers:
        where = ("transformers' attention interface" if is_hf else
                 "attnlab's or torch's MultiheadAttention")
        raise ValueError(f"{type(model).__name__} made no self-attention call through {where}; "
                         "census cannot see its heads")
    if ids is None:
        ids = torch.arange(collector.layers[0][1].lse.shape[-1])
    tokens = tokens_of(tokenizer, ids)
    pieces = (reading_pieces(tokenizer, tokens) if tokenizer is not None
              else [t if i == 0 else " " + t for i, t in enumerate(tokens)])   # ids as numbers
    if trained is None and is_hf:
        trained = getattr(model.config, "max_position_embeddings", None)
    if trained is not None and (not isinstance(trained, int) or isinstance(trained, bool)
                                or trained < 2):
        raise ValueError(f"trained must be an int >= 2 (the length the model was trained at), "
                         f"got {trained!r}")
    out = _assemble(collector, ids if input_ids is not None else None, tokens,
                    name or type(model).__name__, sink_keys, band, real,
                    trained if trained is not None and len(tokens) > trained else None)
    out.pieces = pieces
    if real is not None and not bool(real.all()):
        out.notes.append(f"{int((~real).sum())} padding tokens: their rows count for nothing, "
                         f"and the sink is the first real token (position {sink_start})")
    if out.trained is not None:
        moved = out.changes()
        out.notes.append(
            f"{out.length:,} tokens, past the {out.trained:,} positions the model was trained "
            f"at: each head is labelled on its queries before {out.trained:,}; its statistics "
            f"from {out.trained:,} on are shown beside them. "
            + (f"{len(moved)} head(s) change there: " + "; ".join(moved[:6])
               + (f"; and {len(moved) - 6} more" if len(moved) > 6 else "")
               if moved else "No head's label changes there."))
    if collector.skipped:
        out.notes.append("not counted (not a self-attention over the sequence): "
                         + ", ".join(collector.skipped))
    if importance is not False:
        from attnlab.inspect.importance import head_gradients

        imp = head_gradients(model, input_ids, attention_mask=attention_mask,
                             target=None if importance is True else importance,
                             relevance=True)
        out.importance = imp
        out.summary["importance"] = imp.importance.float()
    return out


def _check_importance(model, is_hf: bool, input_ids, importance) -> None:
    """Refuse ``importance=`` where it cannot be computed: a model that is not a transformers
    causal language model, one whose heads have no output projection, a target outside the
    text."""
    from attnlab.inspect.ablation import attention_modules
    from attnlab.inspect.importance import _target, can_backward

    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not is_hf or out_emb is None or input_ids is None:
        raise ValueError(f"importance= needs a transformers causal language model (it is the "
                         f"loss of the next tokens); {type(model).__name__} is not one")
    attention_modules(model)
    can_backward(model)
    if importance is not True:
        _target(importance, input_ids.shape[-1])


def _assemble(collector, ids, tokens, name, sink_keys, band, real=None,
              trained: int | None = None) -> Census:
    heads = {n: s.lse.shape[-2] for n, s, _ in collector.layers}
    if len(set(heads.values())) > 1:
        raise ValueError("census takes layers with one number of heads; this model's differ: "
                         + ", ".join(f"{n}: {h}" for n, h in heads.items())
                         + "; take the census of a sub-module whose layers agree")
    stats: dict[str, torch.Tensor] = {}
    for field_name in (*ROW_FIELDS, "received"):
        per_layer = [getattr(s, field_name) for _, s, _ in collector.layers]
        if any(t is None for t in per_layer):
            continue
        stats[field_name] = torch.stack([t[0] for t in per_layer]).cpu()      # (L, H, N)
    for field_name in (collector.weighted[0] if collector.weighted else {}):
        stats[field_name] = torch.stack([w[field_name] for w in collector.weighted])
    maps = {}
    if collector.pooled is not None:
        maps = {kind: torch.stack([getattr(s, f"pooled_{kind}")[0]
                                   for _, s, _ in collector.layers]).float().cpu()
                for kind in ("mean", "max")}                                  # (L, H, G, G)
    rows = {}
    for layer, (_, s, _) in enumerate(collector.layers):
        if s.row_weights is not None and s.row_index.numel():
            rows[layer] = (s.row_index.cpu(), s.row_weights[0].float().cpu())  # (H, R, N)
    seen = torch.isfinite(stats["lse"])                    # rows that count and see a key
    causal = [c for _, _, c in collector.layers]
    n = stats["lse"].shape[-1]
    summary_past, labels_past = {}, []
    if trained is not None:               # labels on the trained positions, the rest beside
        before = torch.arange(n) < trained
        summary_past = table.summarize(stats, seen & ~before, causal=causal, ids=ids,
                                       real=real, band=band, sink_keys=sink_keys)
        labels_past = table.label_heads(summary_past)
        seen = seen & before
    summary = table.summarize(stats, seen, causal=causal, ids=ids, real=real, band=band,
                              sink_keys=sink_keys)
    notes = table.withheld_notes(summary)
    share = table.local_means_nothing(n, band, all(causal))
    if share is not None:
        notes.append(f"no head is labelled local: at {n} tokens a band of {band} positions "
                     f"holds {share:.0%} of a uniform head's mass, so the label would say "
                     "nothing; take a longer text, or a smaller band")
    labels = table.label_heads(summary)
    return Census(name, tokens, stats, summary, labels, sink_keys, band, notes=notes,
                  layer_names=[n for n, _, _ in collector.layers], maps=maps, rows=rows,
                  trained=trained, summary_past=summary_past, labels_past=labels_past,
                  causal=causal)
