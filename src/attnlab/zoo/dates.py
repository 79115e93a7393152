"""``dates``: an encoder-decoder Transformer that rewrites dates into ISO 8601.

``"3 March 2021"``, ``"March 3, 2021"``, ``"3 mars 2021"``, ``"3. März 2021"``,
``"3 de marzo de 2021"``, ``"03.03.2021"`` and ``"2021年3月3日"`` all become ``2021-03-03``. Dates
are generated in Python (uniform over 1900-2099, every format and language equally often);
tokens are single characters except month names, which are one token each.

What each output token must read is known by construction (:func:`alignment`): a year or day
digit copies one source digit; a month digit reads the month name, or copies a digit where the
source writes the month as a number; a zero the source does not write, and the dashes, read
nothing in particular. So the model's cross-attention can be checked against the truth.

Model: attnlab's :class:`~attnlab.nn.Transformer` (2 + 2 layers, 4 heads, d = 64, pre-LN)
with learned token and position embeddings and a tied-free output layer.
"""

from __future__ import annotations

import calendar
import random
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.nn import recording
from attnlab.nn.decoder import Transformer
from attnlab.zoo._train import fit_steps

MONTHS = {
    "en": [calendar.month_name[i] for i in range(1, 13)],
    "fr": ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août",
           "septembre", "octobre", "novembre", "décembre"],
    "de": ["Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September",
           "Oktober", "November", "Dezember"],
    "es": ["enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto",
           "septiembre", "octubre", "noviembre", "diciembre"],
}
FORMATS = ("en", "en_us", "fr", "de", "es", "numeric", "zh")
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
_WORDS = sorted({m for names in MONTHS.values() for m in names})
SOURCE_VOCAB = [PAD] + list("0123456789") + [",", ".", "de", "年", "月", "日"] + _WORDS
TARGET_VOCAB = [PAD, BOS, EOS] + list("0123456789") + ["-"]
S_INDEX = {t: i for i, t in enumerate(SOURCE_VOCAB)}
T_INDEX = {t: i for i, t in enumerate(TARGET_VOCAB)}
MAX_SOURCE = 16
TARGET_LEN = 10                       # YYYY-MM-DD


@dataclass(frozen=True)
class Example:
    """A date as typed (source tokens), its ISO target, and which source token each output reads."""
    source: list[str]                 # source tokens
    target: str                       # YYYY-MM-DD
    align: list[int | None]           # per target character: the source index it reads
    copies: list[bool]                # per target character: True where it copies a digit


def render(year: int, month: int, day: int, fmt: str) -> tuple[list[str], dict]:
    """Source tokens of a date in ``fmt`` and where its parts are: ``{"year": [i..],
    "month": [i..] (digits) or i (a name), "day": [i..]}``."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    y, d = list(str(year)), list(str(day))
    toks: list[str] = []
    where: dict = {}

    def put(name, chars):
        where[name] = list(range(len(toks), len(toks) + len(chars)))
        toks.extend(chars)

    def month_name(lang):
        where["month"] = len(toks)
        toks.append(MONTHS[lang][month - 1])

    if fmt in ("en", "fr"):
        put("day", d), month_name(fmt), put("year", y)
    elif fmt == "en_us":
        month_name("en"), put("day", d), toks.append(","), put("year", y)
    elif fmt == "de":
        put("day", d), toks.append("."), month_name("de"), put("year", y)
    elif fmt == "es":
        put("day", d), toks.append("de"), month_name("es"), toks.append("de"), put("year", y)
    elif fmt == "numeric":
        put("day", list(f"{day:02d}")), toks.append(".")
        put("month", list(f"{month:02d}")), toks.append("."), put("year", y)
    else:                                                    # zh
        put("year", y), toks.append("年"), put("month", list(str(month))), toks.append("月")
        put("day", d), toks.append("日")
    return toks, where


def _field(digits: str, at) -> tuple[list[int | None], list[bool]]:
    """Alignment of a 2-digit output field to its source: a name (int) for both digits, or
    the source digits right-aligned (an unwritten leading zero reads nothing)."""
    if isinstance(at, int):
        return [at, at], [False, False]
    pad = [None] * (len(digits) - len(at))
    return pad + list(at), [False] * len(pad) + [True] * len(at)


def example(year: int, month: int, day: int, fmt: str) -> Example:
    """The example of one date written in ``fmt``."""
    source, where = render(year, month, day, fmt)
    m_al, m_cp = _field(f"{month:02d}", where["month"])
    d_al, d_cp = _field(f"{day:02d}", where["day"])
    align = list(where["year"]) + [None] + m_al + [None] + d_al
    copies = [True] * 4 + [False] + m_cp + [False] + d_cp
    return Example(source, f"{year:04d}-{month:02d}-{day:02d}", align, copies)


SPLITS = ("train", "heldout", "all")


def _held_out(year: int, month: int, day: int) -> bool:
    """One date in ten, by a multiplicative hash of the date, is never seen in training."""
    return (year * 10000 + month * 100 + day) * 2654435761 % 2**32 % 10 == 0


def generate(n: int, seed: int = 0, split: str = "train") -> list[Example]:
    """``n`` random dates in random formats, reproducible from ``seed``; ``split="heldout"``
    draws only the tenth of the dates that ``"train"`` never does (every digit still appears
    in every position in training; the dates themselves are new)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        year, month = rng.randint(1900, 2099), rng.randint(1, 12)
        day = rng.randint(1, calendar.monthrange(year, month)[1])
        if split != "all" and _held_out(year, month, day) != (split == "heldout"):
            continue
        out.append(example(year, month, day, rng.choice(FORMATS)))
    return out


def tokenize(text: str) -> list[str]:
    """A date as typed (``"3 March 2021"``, ``"2021年3月3日"``) -> source tokens; raises with
    the unknown piece named."""
    toks: list[str] = []
    for word in text.replace(",", " , ").split():
        if word in S_INDEX and len(word) > 1:
            toks.append(word)
            continue
        i = 0
        while i < len(word):
            name = next((m for m in _WORDS if word.startswith(m, i)), None)
            if name is not None:
                toks.append(name)
                i += len(name)
            elif word[i] in S_INDEX:
                toks.append(word[i])
                i += 1
            else:
                raise ValueError(f"{text!r}: {word[i:]!r} is not part of a date the dates model "
                                 f"reads (digits, month names in {', '.join(MONTHS)}, "
                                 "'.', ',', 'de', 年月日)")
    if not toks or len(toks) > MAX_SOURCE:
        raise ValueError(f"{text!r} gives {len(toks)} tokens; the dates model reads 1 to "
                         f"{MAX_SOURCE}")
    return toks


def batch(examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
    """``src (B, S)`` padded source ids and ``tgt (B, 12)`` = BOS, 10 characters, EOS."""
    src = torch.full((len(examples), max(len(e.source) for e in examples)), S_INDEX[PAD])
    for i, e in enumerate(examples):
        src[i, :len(e.source)] = torch.tensor([S_INDEX[t] for t in e.source])
    tgt = torch.tensor([[T_INDEX[BOS]] + [T_INDEX[c] for c in e.target] + [T_INDEX[EOS]]
                        for e in examples])
    return src, tgt


@dataclass(frozen=True)
class DatesConfig:
    """Sizes of the dates model."""
    d_model: int = 64
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    ffn: int = 128


class DatesModel(nn.Module):
    """Embeddings around attnlab's encoder-decoder :class:`~attnlab.nn.Transformer`."""

    def __init__(self, config: DatesConfig = DatesConfig()):
        super().__init__()
        c = self.config = config
        self.src_embed = nn.Embedding(len(SOURCE_VOCAB), c.d_model)
        self.tgt_embed = nn.Embedding(len(TARGET_VOCAB), c.d_model)
        self.src_pos = nn.Embedding(MAX_SOURCE, c.d_model)
        self.tgt_pos = nn.Embedding(TARGET_LEN + 2, c.d_model)
        self.transformer = Transformer(c.d_model, c.heads, c.encoder_layers, c.decoder_layers,
                                       c.ffn, dropout=0.0, batch_first=True, norm_first=True)
        self.out = nn.Linear(c.d_model, len(TARGET_VOCAB))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """``src (B, S)``, ``tgt_in (B, T)`` (teacher forcing) -> logits ``(B, T, V_t)``."""
        pad = src == S_INDEX[PAD]                                       # (B, S) True = pad
        s = self.src_embed(src) + self.src_pos(torch.arange(src.shape[1]))
        t = self.tgt_embed(tgt_in) + self.tgt_pos(torch.arange(tgt_in.shape[1]))
        h = self.transformer(s, t, src_key_padding_mask=pad, memory_key_padding_mask=pad,
                             tgt_is_causal=True)                        # (B, T, E)
        return self.out(h)

    @torch.no_grad()
    def translate(self, src: torch.Tensor) -> torch.Tensor:
        """Greedy decoding: ``src (B, S)`` -> ``(B, 11)`` target ids after BOS (10 characters
        and EOS)."""
        tgt = torch.full((src.shape[0], 1), T_INDEX[BOS])
        for _ in range(TARGET_LEN + 1):
            nxt = self(src, tgt)[:, -1].argmax(-1, keepdim=True)
            tgt = torch.cat([tgt, nxt], dim=1)
        return tgt[:, 1:]

    def dict_config(self) -> dict:
        """The config as a dict (saved beside the weights)."""
        return asdict(self.config)


@torch.no_grad()
def alignment_accuracy(model: DatesModel, examples: list[Example], layer: int = -1
                       ) -> dict[str, float]:
    """Share of output characters whose largest cross-attention weight (decoder ``layer``,
    mean over heads, teacher-forced) lies on the source token :func:`example` says they read:
    ``"copies"`` for the digits copied from a source digit, ``"names"`` for month digits read
    from a month name."""
    src, tgt = batch(examples)
    cross = _cross_attention(model, src, tgt[:, :-1])[layer]                 # (B, H, T+1, S)
    top = cross.mean(1).argmax(-1)                                           # (B, T+1)
    hits = {"copies": [0, 0], "names": [0, 0]}
    for b, e in enumerate(examples):
        for t, (at, copy) in enumerate(zip(e.align, e.copies)):
            if at is not None:
                h = hits["copies" if copy else "names"]
                h[0] += int(top[b, t]) == at
                h[1] += 1
    return {k: ok / max(n, 1) for k, (ok, n) in hits.items()}


class _Collect:
    """A listener for :mod:`attnlab.nn.recording`: every (module, weights) the model reports."""

    def __init__(self):
        self.calls: list[tuple[nn.Module, torch.Tensor]] = []

    def add(self, module: nn.Module, weights: torch.Tensor, vectors=None) -> None:
        self.calls.append((module, weights))


def _cross_attention(model: DatesModel, src: torch.Tensor, tgt_in: torch.Tensor
                     ) -> list[torch.Tensor]:
    """The decoder's cross-attention maps ``(B, H, T, S)``, one per decoder layer."""
    listener = _Collect()
    token = recording.push(listener)
    try:
        model(src, tgt_in)
    finally:
        recording.pop(token)
    cross = {id(layer.multihead_attn) for layer in model.transformer.decoder.layers}
    return [w for m, w in listener.calls if id(m) in cross]


@torch.no_grad()
def exact_match(model: DatesModel, examples: list[Example]) -> float:
    """Share of examples whose greedy translation is exactly the ISO date."""
    src, _ = batch(examples)
    out = model.translate(src)
    return sum(decode(o) == e.target for o, e in zip(out.tolist(), examples)) / len(examples)


def decode(ids) -> str:
    """Target ids as text (special tokens dropped)."""
    return "".join(TARGET_VOCAB[i] for i in ids if TARGET_VOCAB[i] not in (PAD, BOS, EOS))


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def train(config: DatesConfig = DatesConfig(), *, steps: int = 3000, batch_size: int = 64,
          lr: float = 2e-3, seed: int = 0, log=None) -> DatesModel:
    """Teacher-forced training on fresh generated dates (seeded), AdamW with one-cycle."""
    torch.manual_seed(seed)
    model = DatesModel(config)
    rng = random.Random(seed)

    def step_loss(_step):
        src, tgt = batch(generate(batch_size, seed=rng.randrange(2**31), split="train"))
        logits = model(src, tgt[:, :-1])                                 # (B, T, V_t)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1))

    return fit_steps(model, step_loss, steps=steps, lr=lr, log=log)
