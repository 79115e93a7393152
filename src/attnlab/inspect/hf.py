"""The report of any transformers model from Python: an encoder (its self-attention), a
decoder (causal maps, or the census past :data:`LONG_CONTEXT` tokens), an encoder-decoder (its
three kinds of attention); a local Hugging Face folder loaded with its own tokenizer; and the
memory check that refuses a capture of full maps that would not fit."""

from __future__ import annotations

from pathlib import Path

import torch

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


def inspect_transformers(model, tok, text: str, pair: str | None = None, *,
                         truncate: bool = False, max_new_tokens: int = 20,
                         name: str | None = None, census: bool | None = None,
                         rows=None, importance: bool = False) -> Inspection | Census:
    """Any transformers model with its tokenizer: an encoder (its self-attention), a decoder
    (causal maps, the next-token loss on the text), an encoder-decoder (encoder self,
    decoder causal self-attention over what it generates, and cross-attention). Past
    :data:`LONG_CONTEXT` tokens (or with ``census=True``) an encoder or decoder gets its census
    instead (:func:`attnlab.inspect.census`). ``importance``: the census, with every head's
    importance for the text's loss (:func:`attnlab.inspect.importance.head_gradients`) and its
    value-weighted shares (``value_weighted=``)."""
    import torch.nn.functional as F

    from attnlab.inspect.generative import _square

    if importance:
        if census is False:
            raise ValueError("importance=True is a section of the census report; leave "
                             "census= out (or True) with it")
        census = True

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
        return _census_of(model, tok, batch, name, notes, rows, importance)
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


def _census_of(model, tok, batch, name, notes, rows, importance: bool = False) -> Census:
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
               sharpest=2, name=name, importance=importance, value_weighted=importance)
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
