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

from pathlib import Path

import torch
import torch.nn as nn

from attnlab._threads import uses_spare_threads
from attnlab.inspect.capture import record
from attnlab.inspect.census import Census
from attnlab.inspect.collect import no_special_tokens, rotary
from attnlab.inspect.metrics import head_metrics
from attnlab.inspect.run import Inspection, TextMaps, reading_notes
from attnlab.inspect.taxonomy import label_heads
from attnlab.inspect.tokens import display_tokens

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps."
LONG_CONTEXT = 1024       # past this many tokens show() and attnlab inspect take the census
CENSUS_GRID = 256         # the census report's pooled maps: at most this many cells a side


@uses_spare_threads
def show(model=None, tokenizer=None, text: str | None = None, pair: str | None = None, *,
         attentions=None, tokens=None, encoder_attentions=None, decoder_attentions=None,
         cross_attentions=None, encoder_tokens=None, decoder_tokens=None, inputs=None,
         truncate: bool = False, max_new_tokens: int = 20, neuron_layers=None,
         census: bool | None = None, rows=None,
         name: str | None = None) -> Inspection | Census:
    """Inspect a model (or maps you have) and return the report as an
    :class:`~attnlab.inspect.run.Inspection` that renders itself in a notebook.

    Args:
        model: a name or folder (``"default"``, ``"induction"``, ``"dates"``, a path), a
            loaded attnlab ``BertModel``, transformers model or ``torch.nn`` module; None
            with ``attentions`` (or the encoder-decoder's three).
        tokenizer: the model's tokenizer (loaded models; a transformers tokenizer or
            attnlab's).
        text: the text to run (default: a short sentence); pair: a second sentence (BERT).
        attentions, tokens: precomputed maps and their tokens (see the module docstring).
        inputs: the positional inputs (a tuple) or keyword inputs (a dict) of a plain
            ``torch.nn`` module; ``tokens`` then label its positions.
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

    Returns:
        An :class:`~attnlab.inspect.run.Inspection`, or at long context a
        :class:`~attnlab.inspect.census.Census`; ``display`` it, or ``.save(path)``.
    """
    _check_text(text, pair)
    if model is None:
        if attentions is None and encoder_attentions is None:
            raise TypeError("show() needs a model (a name, a folder or a loaded model) or "
                            "precomputed attentions= with tokens=")
        ins = from_attentions(attentions, tokens, encoder_attentions=encoder_attentions,
                              decoder_attentions=decoder_attentions,
                              cross_attentions=cross_attentions, encoder_tokens=encoder_tokens,
                              decoder_tokens=decoder_tokens, name=name or "maps")
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
    ins.neuron_layers = neuron_layers
    return ins


BYTES_PER_WEIGHT = 28     # peak resident bytes per captured attention weight (measured: a
                          # GPT-2-small shape at 2,048 tokens peaked at 15.1 GB)


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_capture_memory(config, n: int, name: str, available: int | None = None) -> None:
    """Refuse, before any computation, a capture of every layer's full maps that would not fit
    in the memory this machine has free (the process would be killed without a word)."""
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    if not layers or not heads:
        return
    need = BYTES_PER_WEIGHT * layers * heads * n * n
    free = _available_bytes() if available is None else available
    if free is not None and need > 0.8 * free:
        raise MemoryError(
            f"capturing the maps of {layers} x {heads} heads of {name} at {n} tokens needs about "
            f"{need / 1e9:.1f} GB, more than the {free / 1e9:.1f} GB free: use "
            "attnlab.inspect.census(model, tokenizer, text) for every head's statistics in "
            "memory linear in the length, or a shorter text")


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
          rows=None) -> Inspection | Census:
    """The report's contents for a model given by name (``"minilm"``, ``"kjv"``,
    ``"smollm2"``, ``"induction"``, ``"dates"``) or by a Hugging Face folder, on ``text``
    (and ``pair`` for a sentence-pair encoder): an :class:`~attnlab.inspect.run.Inspection`
    (every map), or a :class:`~attnlab.inspect.census.Census` past 1,024 tokens or with
    ``census=True``. The one routing that ``attnlab inspect`` and :func:`show` use; ``show``
    adds only the display.

    Example:
        >>> from attnlab.inspect import build
        >>> report = build("kjv", "In the beginning God created")   # doctest: +SKIP
    """
    from attnlab.inspect import generative as G
    from attnlab.inspect.run import inspect_texts

    kind = G.model_kind(model)
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
                                    name=str(name), census=census, rows=rows)
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


def inspect_transformers(model, tok, text: str, pair: str | None = None, *,
                         truncate: bool = False, max_new_tokens: int = 20,
                         name: str | None = None, census: bool | None = None,
                         rows=None) -> Inspection | Census:
    """Any transformers model with its tokenizer: an encoder (its self-attention), a decoder
    (causal maps, the next-token loss on the text), an encoder-decoder (encoder self,
    decoder causal self-attention over what it generates, and cross-attention). Past
    :data:`LONG_CONTEXT` tokens (or with ``census=True``) an encoder or decoder gets its census
    instead (:func:`attnlab.inspect.census`)."""
    import torch.nn.functional as F

    from attnlab.inspect.generative import _square

    config = model.config
    name = name or getattr(config, "_name_or_path", "") or type(model).__name__
    name = Path(name).name or type(model).__name__
    limit = (getattr(config, "max_position_embeddings", None)
             or getattr(config, "n_positions", None))
    kw = dict(truncation=True, max_length=limit) if truncate and limit else {}
    if pair is not None and (getattr(config, "is_encoder_decoder", False)
                             or getattr(config, "is_decoder", False) or _is_causal_lm(model)):
        raise ValueError(f"pair= is for sentence-pair encoders (BERT); {name} reads one text, "
                         "and its tokenizer would join the two without a separator: join them "
                         "as you mean them, e.g. show(model, tokenizer, text + '\\n' + pair)")
    kw.update(no_special_tokens(tok))
    batch = tok([text], [pair] if pair is not None else None, return_tensors="pt", **kw)
    # sentence ids only for a pair: a tokenizer's zeros are an embedding of their own in models
    # without segments (GPT-2 adds wte[0] to every position)
    keys = ("input_ids", "attention_mask") + (("token_type_ids",) if pair is not None else ())
    batch = {k: batch[k] for k in keys if k in batch}
    ids = batch["input_ids"][0]
    full = tok([text], [pair] if pair is not None else None, return_tensors="pt",
               **{k: v for k, v in kw.items() if k == "add_special_tokens"})
    notes = []
    if ids.numel() < full["input_ids"].shape[1]:
        notes.append(f"the text was cut from {full['input_ids'].shape[1]} to {ids.numel()} "
                     "tokens (truncate)")
    # the census (and only it: it says so in a note) reads rotary positions past their table
    long_ok = rotary(config) and not getattr(config, "is_encoder_decoder", False) and (
        census is True or (census is None and ids.numel() > LONG_CONTEXT))
    if limit is not None and ids.numel() > limit and not long_ok:
        raise ValueError(f"the text has {ids.numel()} tokens, more than the {limit} positions "
                         f"of {name}; shorten it or pass truncate=True")
    encdec = getattr(config, "is_encoder_decoder", False)
    if census is True and encdec:
        raise ValueError(f"census=True takes an encoder or a decoder; {name} is an "
                         "encoder-decoder (its report shows its three kinds of maps)")
    if census or (census is None and not encdec and ids.numel() > LONG_CONTEXT):
        return _census_of(model, tok, batch, name, notes, rows)
    tokens = _token_names(tok, ids)
    notes += reading_notes(tokens, getattr(tok, "unk_token", None), None)
    if encdec:
        batch.pop("token_type_ids", None)                # generate() refuses what it ignores
        return _encoder_decoder(model, tok, batch, tokens, text, notes, max_new_tokens, name)
    causal = bool(getattr(config, "is_decoder", False)) or _is_causal_lm(model)
    check_capture_memory(config, ids.numel(), name)
    with torch.no_grad(), record(model) as rec:
        out = model(**batch)
    kind = "causal" if causal else "self"
    maps = rec.maps(0, kind=kind if kind in rec.kinds else None)
    if causal and getattr(out, "logits", None) is not None and ids.numel() > 1:
        loss = F.cross_entropy(out.logits[0, :-1].float(), ids[1:]).item()
        notes.append(f"next-token loss on the text {loss:.3f} nats")
    ins = _square(maps, tokens, text, notes, kind=kind, model=name,
                  ids=ids,
                  position=len(tokens) - 1 if causal else 0)
    ins.captures[0].attach(rec.vectors(0, kind=kind if kind in rec.kinds else None))
    return ins


def _census_of(model, tok, batch, name, notes, rows) -> Census:
    from attnlab.inspect.census import census

    n = batch["input_ids"].shape[1]
    rows = [] if rows is None else [int(r) for r in rows]
    bad = [r for r in rows if not -n <= r < n]
    if bad:
        raise ValueError(f"rows must be token positions in [0, {n}) (or negative, from the "
                         f"end), got {bad}; this text has {n} tokens")
    rows = sorted({r % n for r in rows} | {n - 1})
    c = census(model, tok, input_ids=batch["input_ids"],
               attention_mask=batch.get("attention_mask"), pooled=CENSUS_GRID, rows=rows,
               sharpest=2, name=name)
    c.notes = [*notes, f"{n} tokens: the census report (every head's statistics, pooled maps "
               f"and exact rows; no N x N map), past {LONG_CONTEXT} tokens", *c.notes]
    return c


def _token_names(tok, ids) -> list[str]:
    """The tokens of ``ids`` as a reader reads them (byte-level BPE decoded, see
    :func:`display_tokens`); an id the vocabulary does not name shows as ``<id N>``."""
    ids = ids.tolist()
    names = display_tokens(tok, [t if t is not None else "" for t in
                                 tok.convert_ids_to_tokens(ids)])
    return [t if t != "" or n is not None else f"<id {i}>"
            for i, t, n in zip(ids, names, tok.convert_ids_to_tokens(ids))]


def _is_causal_lm(model) -> bool:
    import sys

    auto = sys.modules.get("transformers.models.auto.modeling_auto")
    names = getattr(auto, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", {}) if auto else {}
    return model.config.model_type in names and type(model).__name__.endswith("ForCausalLM") \
        or type(model).__name__.endswith("LMHeadModel")


def _encoder_decoder(model, tok, batch, tokens, text, notes, max_new_tokens, name):
    from attnlab.inspect.generative import _square

    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        with record(model) as rec:
            model(**batch, decoder_input_ids=out)
    enc, dec, cross = (rec.maps(0, kind=k) for k in ("self", "causal", "cross"))
    out_tokens = _token_names(tok, out[0])
    generated = tok.decode(out[0], skip_special_tokens=True)
    ins = _square(enc, tokens, text, notes + [f"generated: {generated!r}"], model=name)
    ins.captures[0].attach(rec.vectors(0, kind="self"))
    ins.captures += [
        TextMaps(text, None, out_tokens, None, dec.float(), kind="decoder self (causal)",
                 labels=label_heads(head_metrics(dec, out_tokens)).labels).attach(
                     rec.vectors(0, kind="causal")),
        TextMaps(text, None, out_tokens, None, cross.float(), keys=tokens,
                 kind="cross-attention",
                 labels=[["cross"] * cross.shape[1] for _ in range(cross.shape[0])]).attach(
                     rec.vectors(0, kind="cross"))]
    return ins


def inspect_hf(path: Path, text: str, *, truncate: bool = False, pair: str | None = None,
               census: bool | None = None, rows=None) -> Inspection | Census:
    """A local Hugging Face folder on ``text``, whatever its architecture (see
    :func:`load_hf`)."""
    model, tok = load_hf(path)
    return inspect_transformers(model, tok, text, pair, truncate=truncate, name=Path(path).name,
                                census=census, rows=rows)


def load_hf(path: Path):
    """A local Hugging Face folder loaded with transformers' Auto classes (a causal LM, an
    encoder-decoder, or an encoder) and its own tokenizer; a folder that lacks something gets
    one message naming it."""
    import transformers

    path = Path(path)
    for need, what in (("config.json", "its config"),):
        if not (path / need).is_file():
            raise ValueError(f"model {str(path)!r} has no {need} ({what}); a Hugging Face "
                             "folder holds config.json, the weights and the tokenizer files")
    weights = [p for p in path.iterdir() if p.suffix in (".safetensors", ".bin")]
    if not weights:
        raise ValueError(f"model {str(path)!r} has no weights (model.safetensors or "
                         "pytorch_model.bin); copy the checkpoint again")
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ValueError(f"model {str(path)!r}: transformers cannot read its config.json "
                         f"({str(exc).splitlines()[0][:200]})") from None
    # transformers builds an empty tokenizer (every word unknown) for a folder without one
    vocab_files = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model", "tokenizer.model")
    if not any((path / f).is_file() for f in vocab_files):
        raise ValueError(f"model {str(path)!r} has no tokenizer files (one of "
                         f"{', '.join(vocab_files)}); copy them from the checkpoint")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        why = str(exc).splitlines()[0][:160]
        raise ValueError(f"model {str(path)!r} has no tokenizer transformers can load "
                         f"(tokenizer.json or the vocabulary files; {why})") from None
    auto = transformers
    if config.is_encoder_decoder:
        classes = (auto.AutoModelForSeq2SeqLM, auto.AutoModel)
    elif getattr(config, "is_decoder", False) or _causal_config(config):
        classes = (auto.AutoModelForCausalLM, auto.AutoModel)
    else:
        classes = (auto.AutoModel,)
    model, last = None, None
    for cls in classes:
        try:
            model = cls.from_pretrained(str(path), local_files_only=True).eval()
            break
        except ValueError as exc:                # this Auto class does not map the model type
            last = exc
        except Exception as exc:                 # transformers and safetensors raise many types
            raise ValueError(f"model {str(path)!r}: transformers cannot load the weights "
                             f"({str(exc).splitlines()[0][:200]}); copy the checkpoint "
                             "again") from None
    if model is None:
        raise ValueError(f"model {str(path)!r}: no transformers class loads its model_type "
                         f"{config.model_type!r} ({str(last).splitlines()[0][:160]})")
    return model, tok


def _causal_config(config) -> bool:
    """Whether transformers maps this config's model type to a causal LM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and config.model_type not in (
        "bert", "roberta", "xlm-roberta", "electra", "ernie", "camembert")
