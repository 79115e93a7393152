"""One call from Python to the interactive report: ``show(model, tokenizer, text)``.

    from attnlab.inspect import show

    show("default", text="The cat sat on the mat.")           # the embedded all-MiniLM-L6-v2
    show(model, tokenizer, "The cat sat on the mat.")          # any transformers model
    show(attentions=out.attentions, tokens=tokens)             # maps you already have (bertviz)
    report = show(model, tokenizer, text); report.save("report.html")

The result is an :class:`~attnlab.inspect.run.Inspection`; the last expression of a Jupyter
cell renders it inline (JupyterLab, Notebook 7, VS Code, Colab), with no network and no
widgets, and ``.save(path)`` writes the same standalone file as ``attnlab inspect``.

What it takes:

* ``"default"``, ``"induction"``, ``"dates"`` or a local folder, as ``attnlab inspect
  --model``: the embedded models, a BERT folder, any Hugging Face folder (loaded with
  transformers' Auto classes and the folder's tokenizer);
* a loaded model: attnlab's :class:`~attnlab.nn.BertModel` with its tokenizer, any
  transformers model with its tokenizer (an encoder; a decoder, whose maps are causal; an
  encoder-decoder: the encoder's self-attention, the decoder's causal self-attention over what
  it generates and the cross-attention, three views of one report), or any ``torch.nn``
  module built on ``nn.MultiheadAttention`` (with ``inputs=`` and ``tokens=``);
* precomputed maps: ``attentions`` (a tuple of per-layer ``(B, H, N, N)``, as
  ``output_attentions=True`` returns them, or one ``(L, H, N, N)`` tensor) with ``tokens``,
  as bertviz's ``head_view(attention, tokens)``; for an encoder-decoder
  ``encoder_attentions``, ``decoder_attentions`` and ``cross_attentions`` with
  ``encoder_tokens`` and ``decoder_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from attnlab._threads import uses_spare_threads
from attnlab.inspect.capture import record
from attnlab.inspect.census import Census
from attnlab.inspect.hf import (
    DEFAULT_TEXT,
    inspect_transformers,
    load_hf,
)
from attnlab.inspect.metrics import head_metrics
from attnlab.inspect.run import Inspection, TextMaps
from attnlab.inspect.taxonomy import label_heads


@dataclass(frozen=True)
class ShowOptions:
    """How :func:`show` runs the model and draws the report, as scikit-learn's Display
    objects take theirs: one object, passed as ``show(..., options=ShowOptions(...))``.

    Args:
        truncate: cut a text longer than the model's positions instead of refusing it.
        max_new_tokens: what an encoder-decoder generates to show its decoder.
        neuron_layers: the layers whose query and key vectors the neuron view embeds
            (default: as many as keep the report small).
        census: a transformers encoder or decoder past :data:`LONG_CONTEXT` tokens gets the
            census report (statistics, pooled maps, exact rows; memory linear in the length)
            instead of every map: None (default) switches there, True always, False never.
        rows: the query positions whose exact weights the census report keeps (beside the
            last one and each layer's sharpest).
        name: the model's name in the report.
    """

    truncate: bool = False
    max_new_tokens: int = 20
    neuron_layers: tuple[int, ...] | list[int] | None = None
    census: bool | None = None
    rows: tuple[int, ...] | list[int] | None = None
    name: str | None = None


_MAP_PARTS = ("encoder", "decoder", "cross")


@uses_spare_threads
def show(model=None, tokenizer=None, text: str | None = None, pair: str | None = None, *,
         attentions=None, tokens=None, inputs=None,
         options: ShowOptions | None = None) -> Inspection | Census:
    """Inspect a model (or maps you have) and return the report as an
    :class:`~attnlab.inspect.run.Inspection` that renders itself in a notebook.

    Args:
        model: a name or folder (``"default"``, ``"induction"``, ``"dates"``, a path), a
            loaded attnlab ``BertModel``, transformers model or ``torch.nn`` module; None
            with ``attentions``.
        tokenizer: the model's tokenizer (loaded models; a transformers tokenizer or
            attnlab's).
        text: the text to run (default: a short sentence).
        pair: a second sentence (BERT).
        attentions: precomputed maps (see the module docstring): a tuple of per-layer
            ``(B, H, N, N)`` or one ``(L, H, N, N)`` tensor; for an encoder-decoder a dict
            with ``"encoder"``, ``"decoder"`` and ``"cross"`` maps, as bertviz's model_view.
        tokens: the maps' tokens, or a plain module's position labels; for an
            encoder-decoder a dict with ``"encoder"`` and ``"decoder"`` tokens.
        inputs: the positional inputs (a tuple) or keyword inputs (a dict) of a plain
            ``torch.nn`` module; ``tokens`` then label its positions.
        options: a :class:`ShowOptions` (truncation, generation length, neuron layers, the
            census switch and rows, the model's name); the defaults without it.

    Returns:
        An :class:`~attnlab.inspect.run.Inspection`, or at long context a
        :class:`~attnlab.inspect.census.Census`; ``display`` it, or ``.save(path)``.
    """
    if options is None:
        options = ShowOptions()
    elif not isinstance(options, ShowOptions):
        raise TypeError(f"options must be a ShowOptions, got {type(options).__name__}; e.g. "
                        f"show(..., options=ShowOptions(truncate=True))")
    truncate, max_new_tokens, census = options.truncate, options.max_new_tokens, options.census
    rows, name = options.rows, options.name
    _check_text(text, pair)
    if model is None:
        if attentions is None:
            raise TypeError("show() needs a model (a name, a folder or a loaded model) or "
                            "precomputed attentions= with tokens=")
        if isinstance(attentions, dict):
            ins = _from_parts(attentions, tokens, name or "maps")
        else:
            ins = from_attentions(attentions, tokens, name=name or "maps")
    elif isinstance(model, (str, Path)):
        ins = build(model, text, pair, truncate=truncate, census=census, rows=rows)
    elif not isinstance(model, nn.Module):
        raise TypeError(f"model must be a name, a folder or a torch.nn.Module, got "
                        f"{type(model).__name__}")
    else:
        from attnlab.integrations.transformers import is_transformers_model
        from attnlab.nn.bert import BertModel

        was = model.training
        model.eval()
        try:
            if isinstance(model, BertModel):
                from attnlab.inspect.run import inspect_texts

                ins = inspect_texts([(text or DEFAULT_TEXT, pair)], model, truncate=truncate,
                                    tokenizer=tokenizer)
            elif is_transformers_model(model):
                if tokenizer is None:
                    raise ValueError("a transformers model needs its tokenizer: show(model, "
                                     "tokenizer, text)")
                ins = inspect_transformers(model, tokenizer, text or DEFAULT_TEXT, pair,
                                           truncate=truncate, max_new_tokens=max_new_tokens,
                                           name=name, census=census, rows=rows)
            else:
                ins = _from_module(model, inputs, tokens, name)
        finally:
            model.train(was)
    if name:
        ins.model = name
    if isinstance(ins, Census):
        return ins
    if text is None and ins.texts and ins.texts[0][0] == DEFAULT_TEXT:     # said, not hidden
        ins.notes = [f"no text given: the default sentence ({DEFAULT_TEXT!r})", *ins.notes]
    ins.neuron_layers = None if options.neuron_layers is None else list(options.neuron_layers)
    return ins


def _from_parts(attentions: dict, tokens, name: str) -> Inspection:
    """An encoder-decoder's precomputed maps, given as dicts of their parts."""
    unknown = sorted(set(attentions) - set(_MAP_PARTS))
    if unknown:
        raise ValueError(f"attentions as a dict takes the keys {', '.join(_MAP_PARTS)}; got "
                         f"{', '.join(map(repr, unknown))}")
    if not isinstance(tokens, dict) or sorted(tokens) != ["decoder", "encoder"]:
        raise ValueError("an encoder-decoder's maps need tokens={'encoder': [...], "
                         "'decoder': [...]}; got "
                         f"{sorted(tokens) if isinstance(tokens, dict) else type(tokens).__name__}")
    return from_attentions(None, None, encoder_attentions=attentions.get("encoder"),
                           decoder_attentions=attentions.get("decoder"),
                           cross_attentions=attentions.get("cross"),
                           encoder_tokens=tokens["encoder"], decoder_tokens=tokens["decoder"],
                           name=name)


def _check_text(text, pair) -> None:
    """Refuse what show() would otherwise have to guess: several texts, an empty one."""
    for what, value in (("text", text), ("pair", pair)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise TypeError(
                f"{what} must be one string, got {type(value).__name__}"
                + (f" of {len(value)} items: call show() once per text (attnlab inspect "
                   "--file reads a corpus), and give a BERT sentence pair as text= and pair="
                   if isinstance(value, (list, tuple)) else ""))
        if not value.strip():
            raise ValueError(f"{what} is empty; pass some text, or leave {what} out"
                             + (" for the default sentence" if what == "text" else ""))


def build(model: str | Path, text: str | None = None, pair: str | None = None, *,
          truncate: bool = False, census: bool | None = None,
          rows=None, importance: bool = False) -> Inspection | Census:
    """The report's contents for a model given by name (``"minilm"``, ``"kjv"``,
    ``"smollm2"``, ``"induction"``, ``"dates"``) or by a Hugging Face folder, on ``text``
    (and ``pair`` for a sentence-pair encoder): an :class:`~attnlab.inspect.run.Inspection`
    (every map), or a :class:`~attnlab.inspect.census.Census` past 1,024 tokens or with
    ``census=True``. The one routing that ``attnlab inspect`` and :func:`show` use; ``show``
    adds only the display. ``importance``: the census with every head's importance for the
    text's loss (a causal language model: ``"kjv"``, ``"smollm2"``, a decoder folder).

    Example:
        >>> from attnlab.inspect import build
        >>> report = build("kjv", "In the beginning God created")   # doctest: +SKIP
    """
    from attnlab.inspect import generative as G
    from attnlab.inspect.run import inspect_texts

    kind = G.model_kind(model)
    if importance and kind not in ("hf", "kjv", "smollm2"):
        raise ValueError(f"importance= reads the loss of a causal language model: 'kjv', "
                         f"'smollm2' or a Hugging Face decoder folder; {model} is not one")
    if kind in ("induction", "dates") and pair is not None:
        raise ValueError(f"pair= is for sentence-pair encoders; {model} reads one text")
    if kind == "induction":
        return G.inspect_induction(text)
    if kind == "dates":
        return G.inspect_dates(text)
    if kind in ("hf", "kjv", "smollm2"):
        from attnlab import zoo

        loaded, tok = zoo.load_lm(kind) if kind != "hf" else load_hf(Path(model))
        name = kind if kind != "hf" else Path(model).name
        return inspect_transformers(loaded, tok, text or DEFAULT_TEXT, pair, truncate=truncate,
                                    name=str(name), census=census, rows=rows,
                                    importance=importance)
    return inspect_texts([(text or DEFAULT_TEXT, pair)], str(model), truncate=truncate)


def load_kjv():
    """The zoo's byte-level decoder and its tokenizer."""
    from attnlab import zoo

    return zoo.load_lm("kjv")


def _maps_of(attn, what: str) -> torch.Tensor:
    """``(L, H, N_q, N_k)`` float64 of the first sequence of precomputed maps."""
    if isinstance(attn, (tuple, list)):
        if not attn:
            raise ValueError(
                f"{what} is an empty tuple: the model returned no attention maps. transformers "
                "5 returns them only from an implementation that computes them: load the model "
                "with attn_implementation='eager' and pass output_attentions=True, take "
                "outputs.attentions (outputs[-1] may be another field), or let attnlab run the "
                "model: show(model, tokenizer, text)")
        if not all(isinstance(a, torch.Tensor) for a in attn):
            raise TypeError(f"{what} must be a tuple of per-layer tensors (B, H, N, N), as "
                            "output_attentions=True returns them, or one (L, H, N, N) tensor")
        attn = torch.stack([a[0] if a.dim() == 4 else a for a in attn])
    if not isinstance(attn, torch.Tensor) or attn.dim() not in (4, 5):
        raise TypeError(f"{what} must be per-layer maps (B, H, N, N) or (L, H, N, N), got "
                        f"{type(attn).__name__}")
    if attn.dim() == 5:
        attn = attn[:, 0]
    return attn.detach().double().cpu()


def from_attentions(attentions=None, tokens=None, *, encoder_attentions=None,
                    decoder_attentions=None, cross_attentions=None, encoder_tokens=None,
                    decoder_tokens=None, name: str = "maps") -> Inspection:
    """An Inspection of maps computed elsewhere (bertviz's inputs): ``attentions`` with
    ``tokens``, or an encoder-decoder's three kinds with their tokens."""
    from attnlab.inspect.generative import _square

    def check(maps, toks, what, n_q=None):
        if toks is None or len(toks) != maps.shape[-1] or (n_q or maps.shape[-2]) != \
                maps.shape[-2]:
            raise ValueError(f"{what}: the maps are {tuple(maps.shape[-2:])} but "
                             f"{0 if toks is None else len(toks)} tokens were given; give one "
                             "token per position")

    if attentions is not None:
        maps = _maps_of(attentions, "attentions")
        check(maps, tokens, "tokens")
        causal = bool(torch.triu(maps, diagonal=1).abs().max() == 0) and maps.shape[-1] > 1
        return _square(maps, list(tokens), " ".join(tokens), [], model=name,
                       kind="causal" if causal else "self")
    if encoder_attentions is None or encoder_tokens is None:
        raise TypeError("give attentions= with tokens=, or encoder_attentions= with "
                        "encoder_tokens= (and optionally decoder_attentions= / "
                        "cross_attentions= with decoder_tokens=)")
    enc = _maps_of(encoder_attentions, "encoder_attentions")
    check(enc, encoder_tokens, "encoder_tokens")
    ins = _square(enc, list(encoder_tokens), " ".join(encoder_tokens), [], model=name)
    if decoder_attentions is not None:
        dec = _maps_of(decoder_attentions, "decoder_attentions")
        check(dec, decoder_tokens, "decoder_tokens")
        ins.captures.append(TextMaps(ins.texts[0][0], None, list(decoder_tokens), None,
                                     dec.float(), kind="decoder self (causal)",
                                     labels=label_heads(head_metrics(dec,
                                                                     decoder_tokens)).labels))
    if cross_attentions is not None:
        cross = _maps_of(cross_attentions, "cross_attentions")
        check(cross, encoder_tokens, "encoder_tokens (the keys of cross-attention)",
              len(decoder_tokens or []))
        ins.captures.append(TextMaps(ins.texts[0][0], None, list(decoder_tokens), None,
                                     cross.float(), keys=list(encoder_tokens),
                                     kind="cross-attention",
                                     labels=[["cross"] * cross.shape[1]] * cross.shape[0]))
    return ins


def _from_module(model: nn.Module, inputs, tokens, name) -> Inspection:
    """A plain torch module (nn.MultiheadAttention inside): run ``inputs`` under the
    recorder; maps of the first sequence."""
    from attnlab.inspect.generative import _square

    if inputs is None or tokens is None:
        raise ValueError(f"{type(model).__name__} is neither an attnlab BertModel nor a "
                         "transformers model: pass inputs= (its positional inputs as a tuple, "
                         "or keyword inputs as a dict) and tokens= (a label per position)")
    with torch.no_grad(), record(model) as rec:
        model(**inputs) if isinstance(inputs, dict) else model(*inputs)
    kinds = sorted(set(rec.kinds))
    kind = "self" if "self" in kinds else kinds[0]
    maps = rec.maps(0, kind=kind)
    if maps.shape[-1] != len(tokens):
        raise ValueError(f"tokens has {len(tokens)} labels but the maps have "
                         f"{maps.shape[-1]} positions; give one label per position")
    ins = _square(maps, list(tokens), " ".join(map(str, tokens)), [],
                  model=name or type(model).__name__, kind=kind)
    ins.captures[0].attach(rec.vectors(0, kind=kind))
    return ins
