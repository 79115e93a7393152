"""The inspection job: capture a BERT-style model's attention on texts, measure, label, attribute.

:func:`inspect_texts` runs attnlab's :class:`~attnlab.nn.BertModel` (the embedded
all-MiniLM-L6-v2 by default) under :func:`~attnlab.inspect.record` on one text, a sentence pair
or a corpus, and returns an :class:`Inspection`: the first text's maps and attributions, and
the metrics, head distances and taxonomy averaged over all texts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.inspect.attribution import FLOW_MAX_TOKENS, bert_gradient_attention, flow, rollout
from attnlab.inspect.capture import record
from attnlab.inspect.metrics import (HeadMetrics, embed_2d, head_metrics, js_distances,
                                     layer_distance_summary)
from attnlab.inspect.taxonomy import Taxonomy, label_heads

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps."


@dataclass
class Inspection:
    model: str
    texts: list[tuple[str, str | None]]
    tokens: list[str]                       # of the first text
    maps: torch.Tensor                      # (L, H, n, n) of the first text
    segments: torch.Tensor | None
    metrics: HeadMetrics                    # averaged over all texts
    per_text: list[HeadMetrics]
    dist: torch.Tensor                      # (L*H, L*H) mean JS distance
    xy: torch.Tensor                        # (L*H, 2)
    layer_summary: dict[str, float]
    taxonomy: Taxonomy
    rollout: torch.Tensor                   # (n, n)
    flow: torch.Tensor | None
    gradient: torch.Tensor | None
    notes: list[str] = field(default_factory=list)

    @property
    def layers(self) -> int:
        return self.maps.shape[0]

    @property
    def heads(self) -> int:
        return self.maps.shape[1]


def _encode(tok, text: str, pair: str | None):
    batch = tok([text], [pair] if pair is not None else None, return_tensors="pt",
                truncation=True, max_length=128)
    tokens = tok.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    seg = batch.get("token_type_ids")
    return batch, tokens, (seg[0] if seg is not None and pair is not None else None)


def inspect_texts(texts: list[tuple[str, str | None]], model: str = "default",
                  progress: Callable[[int], None] | None = None) -> Inspection:
    """Inspect ``texts`` (pairs ``(text, pair_or_None)``) with the model at ``model``."""
    from attnlab.nn.bert import BertModel, load_tokenizer, resolve_model_path

    if not texts:
        raise ValueError("texts is empty: give at least one text")
    path = resolve_model_path(model)
    bert = BertModel.from_pretrained(path)
    tok = load_tokenizer(path)
    per_text, dists = [], []
    first = None
    for i, (text, pair) in enumerate(texts):
        batch, tokens, seg = _encode(tok, text, pair)
        with torch.no_grad(), record(bert) as rec:
            bert(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        maps = rec.maps(0)                                            # (L, H, n, n)
        per_text.append(head_metrics(maps, tokens, seg))
        dists.append(js_distances(maps))
        if first is None:
            first = (batch, tokens, seg, maps)
        if progress is not None:
            progress(i + 1)
    batch, tokens, seg, maps = first
    metrics = HeadMetrics.mean(per_text)
    dist = torch.stack(dists).mean(0)
    notes = []
    f = None
    if len(tokens) <= FLOW_MAX_TOKENS:
        f = flow(maps)
    else:
        notes.append(f"attention flow skipped: {len(tokens)} tokens is more than the "
                     f"{FLOW_MAX_TOKENS} it allows (rollout is shown)")
    grad = bert_gradient_attention(bert, batch["input_ids"], batch["attention_mask"])
    name = "all-MiniLM-L6-v2 (embedded)" if str(model) == "default" else path.name
    return Inspection(model=name, texts=texts, tokens=tokens, maps=maps, segments=seg,
                      metrics=metrics, per_text=per_text, dist=dist, xy=embed_2d(dist),
                      layer_summary=layer_distance_summary(dist, maps.shape[1]),
                      taxonomy=label_heads(metrics, dist), rollout=rollout(maps), flow=f,
                      gradient=grad, notes=notes)
