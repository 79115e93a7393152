"""Inspection of causal language models and encoder-decoders: attnlab's embedded ``induction``
and ``dates`` models, and any local Hugging Face decoder or encoder-decoder folder.

Same :class:`~attnlab.inspect.run.Inspection` as the encoder job, so the same report draws it:

* causal models: the maps are lower triangles; the causal-model detectors
  (:mod:`attnlab.inspect.heads`) join the metrics and the taxonomy, and a table sets each
  head's attention mass (on the first token, the usual sink) beside the change of the loss
  when the head is zero-ablated (:mod:`attnlab.inspect.ablation`; Michel et al. 2019);
* encoder-decoders: the encoder's self-attention is the main capture (metrics, taxonomy,
  rollout), the decoder's causal self-attention over the generated tokens and the
  cross-attention (output tokens x source tokens) are two more captures the report's text
  selector switches to; the dates model's cross-attention carries the known alignment.
"""

from __future__ import annotations

import calendar
from pathlib import Path

import torch

from attnlab.inspect.ablation import head_importance
from attnlab.inspect.attribution import flow_from, max_flow_solver, rollout
from attnlab.inspect.capture import record
from attnlab.inspect.heads import copying_score
from attnlab.inspect.metrics import embed_2d, head_metrics, js_distances, layer_distance_summary
from attnlab.inspect.run import Inspection, TextMaps
from attnlab.inspect.taxonomy import label_heads

DEFAULT_DATE = "3 March 2021"


def _square(maps, tokens, text, notes, *, kind="self", position=0, ids=None, extra=None,
            table=None, model="", start_layer=0):
    """An Inspection of one square capture ``maps (L, H, n, n)``."""
    metrics = head_metrics(maps, tokens, ids=ids)
    for k, v in (extra or {}).items():
        setattr(metrics, k, v)
    dist = js_distances(maps)
    roll = rollout(maps, start_layer=start_layer, per_layer=True)
    n = len(tokens)
    f_from = None
    if n <= 128 or max_flow_solver(n) == "numba":
        f_from = flow_from(maps[start_layer:], position)
    else:                                 # said, never silently left out
        notes = [*notes, f"attention flow skipped: at {n} tokens the flow into one position "
                         f"takes about {0.1 * n * (n / 512) ** 2:.0f} s with scipy (one "
                         "max-flow problem per token); install numba (pip install "
                         "'attnlab[fast]') to compute it"]
    return Inspection(
        model=model, texts=[(text, None)], tokens=tokens, maps=maps, segments=None,
        metrics=metrics, per_text=[metrics], dist=dist, xy=embed_2d(dist),
        layer_summary=layer_distance_summary(dist, maps.shape[1]),
        taxonomy=label_heads(metrics, dist),
        rollout=roll[-1], flow=None, gradient=None, notes=notes,
        captures=[TextMaps(text, None, tokens, None, maps.float(), kind=kind)],
        rollout_layers=roll, flow_from=f_from, flow_position=position, target="loss",
        start_layer=start_layer, head_table=table)


def _ablation_table(maps, importance, what):
    from attnlab.core.stats import reference_stats

    first = torch.stack([reference_stats(layer).sink_mass.mean(-1) for layer in maps])  # (L, H)
    rows = []
    for layer in range(maps.shape[0]):
        for head in range(maps.shape[1]):
            rows.append([f"L{layer}H{head}", float(first[layer, head]),
                         float(maps[layer, head].amax(-1).mean()),
                         float(importance[layer, head])])
    return {"title": "Attention mass and ablation",
            "caption": f"Per head: the mean weight on the first token (the usual sink), the mean "
                       f"largest weight, and the change of {what} when the head's output is "
                       "zeroed (Michel et al. 2019). High weight is not effect: compare the "
                       "columns.",
            "columns": ["head", "first-token mass", "mean max weight", "loss increase"],
            "rows": rows}


def _parse_ids(text: str, vocab: int) -> torch.Tensor:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"the induction model reads token ids 1..{vocab - 1} separated by "
                         f"spaces (for example '5 17 33 5 17'), got {text[:60]!r}") from None
    bad = [i for i in ids if not 1 <= i < vocab]
    if not ids or bad:
        raise ValueError(f"token ids must be in 1..{vocab - 1} (0 is BOS and is added), got "
                         f"{bad[:5] if bad else 'none'}")
    return torch.tensor([0] + ids)


def inspect_induction(text: str | None = None) -> Inspection:
    """The ``induction`` model on ``text`` (token ids) or, by default, BOS + 5 random tokens
    + a 20-token segment + the same segment (seed 0)."""
    from attnlab import zoo
    from attnlab.zoo.induction import repeat_losses, repeated_tokens

    model = zoo.load("induction")
    c = model.config
    if text is None:
        ids = repeated_tokens(1, 20, c.vocab, prefix=5,
                              generator=torch.Generator().manual_seed(0))[0]
        text = " ".join(str(i) for i in ids[1:].tolist())
    else:
        ids = _parse_ids(text, c.vocab)
    if ids.numel() > c.max_len:
        raise ValueError(f"the induction model takes {c.max_len} positions (BOS included); "
                         f"the text has {ids.numel()}")
    with torch.no_grad(), record(model) as rec:
        model(ids[None])
    maps = rec.maps(0)                                                  # (L, H, n, n)
    tokens = ["BOS"] + [f"t{i}" for i in ids[1:].tolist()]
    batch = repeated_tokens(64, 20, c.vocab, prefix=7, generator=torch.Generator().manual_seed(1))
    importance = head_importance(model, lambda: repeat_losses(model, batch, 20)[1])
    table = _ablation_table(maps, importance,
                            "the second-repeat loss on 64 sequences of 7 random + 20 + the "
                            "same 20 tokens")
    with torch.no_grad():
        first, second = repeat_losses(model, batch, 20)
    notes = [f"second-repeat loss {second:.3f} nats against {first:.3f} on the first repeat "
             "(64 sequences)"]
    copying = torch.tensor([[copying_score(model.ov_circuit(layer, head))
                             for head in range(c.heads)] for layer in range(c.layers)],
                           dtype=torch.float64)
    return _square(maps, tokens, text, notes, kind="causal", ids=ids, position=len(tokens) - 1,
                   extra={"ablation": importance, "copying": copying}, table=table,
                   model="induction (embedded)")


def inspect_dates(text: str | None = None) -> Inspection:
    """The ``dates`` model on a date as typed (default ``"3 March 2021"``)."""
    from attnlab import zoo
    from attnlab.zoo.dates import S_INDEX, T_INDEX, TARGET_VOCAB, tokenize

    model = zoo.load("dates")
    text = DEFAULT_DATE if text is None else text
    source = tokenize(text)
    src = torch.tensor([[S_INDEX[t] for t in source]])
    out = model.translate(src)[0]                                       # (11,) chars + EOS
    tgt_in = torch.cat([torch.tensor([T_INDEX["<s>"]]), out[:-1]])[None]
    with torch.no_grad(), record(model) as rec:
        model(src, tgt_in)
    enc = rec.maps(0, kind="self")                                      # (L, H, S, S)
    dec = rec.maps(0, kind="causal")                                    # (L, H, T, T)
    cross = rec.maps(0, kind="cross")                                   # (L, H, T, S)
    produced = [TARGET_VOCAB[i] for i in out.tolist()]
    written = "".join(t for t in produced if len(t) == 1)
    inputs = ["<s>"] + produced[:-1]
    align = _known_alignment(source, written)
    notes = [f"{text!r} -> {written!r}"]
    ins = _square(enc, source, text, notes, model="dates (embedded)")
    queries = [f"{q}\u2192{p}" for q, p in zip(inputs, produced)]       # input -> prediction
    cross_labels = [["cross"] * cross.shape[1] for _ in range(cross.shape[0])]
    dec_metrics = head_metrics(dec, inputs)
    ins.captures += [
        TextMaps(text, None, inputs, None, dec.float(), kind="decoder self (causal)",
                 labels=label_heads(dec_metrics).labels),
        TextMaps(text, None, queries, None, cross.float(), keys=source, kind="cross-attention",
                 align=align, labels=cross_labels)]
    return ins


def _known_alignment(source: list[str], written: str) -> list[int | None] | None:
    """Per decoder position (10 characters, then EOS), the source token it should read when the
    output is a well-formed date whose parts the source holds; None where it reads nothing."""
    from attnlab.zoo.dates import FORMATS, example

    try:
        year, month, day = (int(x) for x in written.split("-"))
        calendar.monthrange(year, month)
    except (ValueError, calendar.IllegalMonthError):
        return None
    for fmt in FORMATS:
        e = example(year, month, day, fmt)
        if e.source == source:
            return e.align + [None]
    return None


def model_kind(model: str | Path) -> str:
    """Which inspection a model gets: ``"encoder"`` (the main job: the embedded
    all-MiniLM-L6-v2, ``"default"``, or a local BERT folder), ``"induction"`` / ``"dates"`` (the
    embedded zoo models), ``"kjv"`` (the zoo's byte-level decoder), ``"smollm2"`` (the real
    pretrained decoder, :mod:`attnlab.zoo.smollm2`) or ``"hf"`` (any other
    local Hugging Face folder: a decoder or an encoder-decoder), decided from the folder's
    ``config.json``."""
    if str(model) in ("induction", "dates", "kjv", "smollm2"):
        return str(model)
    config = Path(model) / "config.json"
    if str(model) != "default" and config.is_file():
        import json

        try:
            cfg = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"model {str(model)!r}: {config} is not valid JSON ({exc}); "
                             "restore the checkpoint's config.json") from None
        if cfg.get("model_type") not in (None, "bert"):
            return "hf"
    return "encoder"
