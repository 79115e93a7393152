"""``kjv``: a small byte-level causal language model, Llama-shaped with rotary positions, trained
on the King James Bible at contexts up to 4,096 bytes.

It exists to be looked at at long context, where the embedded encoder (trained at 128 tokens)
and the zoo's ``induction`` model (64 positions) cannot go. The text is Debian's
``bible-kjv-text`` (read through its ``bible`` program, package ``bible-kjv``), one byte per
token through transformers' ``ByT5Tokenizer`` (no vocabulary file). Two books never enter
training, Acts and Revelation (:data:`HELD_OUT`): the census and the claims in
``kjv.json`` are measured on them.

The model is a transformers ``LlamaForCausalLM`` (4 layers, 8 query heads and 2 key/value
heads of dim 32, RoPE base 10,000), so every transformers tool and attnlab's integration take it
as they take any Llama. It is trained in two stages (:data:`SCHEDULE`): plain text with a
quarter of the windows repeating their first half, then half of the windows repeating a span of
random length at a random place, so that copying from an earlier occurrence pays (the induction
circuit of Olsson et al. 2022).

    >>> from attnlab import zoo
    >>> model, tokenizer = zoo.load("kjv"), zoo.kjv.tokenizer()
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

HELD_OUT = ("Acts", "Revelation")
_HEADER = re.compile(r"^(\S.*?) (\d+)$")


@dataclass(frozen=True)
class KJVConfig:
    """Sizes of the kjv model (the fields of its transformers ``LlamaConfig``)."""
    vocab_size: int = 259               # ByT5's 3 special ids + 256 bytes
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0


def build(config: KJVConfig = KJVConfig()):
    """An untrained ``LlamaForCausalLM`` of this shape (tied embeddings, no dropout)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = asdict(config)
    rope = c.pop("rope_theta")
    hf = LlamaConfig(**c, tie_word_embeddings=True, pad_token_id=0, bos_token_id=None,
                     eos_token_id=1, rope_parameters={"rope_type": "default",
                                                      "rope_theta": rope})
    model = LlamaForCausalLM(hf)
    model.dict_config = lambda: asdict(config)
    return model


def tokenizer():
    """The byte tokenizer: transformers' ``ByT5Tokenizer`` with no extra ids (id = byte + 3).
    Encode with ``add_special_tokens=False``; the model was trained without an end token."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer(extra_ids=0)


def encode(text: str) -> torch.Tensor:
    """``text`` as the model's ids, ``(N,)`` (UTF-8 bytes + 3)."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long) + 3


def books() -> dict[str, str]:
    """Every book of the King James Bible as plain text: chapter headings ``Book N``, one verse
    per line ``n text`` (the ``bible`` program's line wrapping undone)."""
    exe = shutil.which("bible")
    if exe is None:
        raise FileNotFoundError("the kjv text comes from Debian's bible-kjv; install it: "
                                "sudo apt-get install -y bible-kjv")
    raw = subprocess.run([exe, "gen1:1-rev22:21"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    out: dict[str, list[str]] = {}
    book, verse = None, None
    for line in raw.splitlines():
        head = _HEADER.match(line)
        if head:
            book = head.group(1)
            out.setdefault(book, []).append(line)
            verse = None
        elif not line.strip():
            continue
        elif line.startswith("  ") and line.strip()[:1].isdigit():
            verse = line.strip()
            out[book].append(verse)
        else:                                   # a wrapped verse continues
            out[book][-1] += " " + line.strip()
    return {name: "\n".join(lines) + "\n" for name, lines in out.items()}


def corpus(split: str = "train") -> str:
    """The training text (every book but :data:`HELD_OUT`) or the held-out text (those two)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    parts = books()
    keep = [b for b in parts if (b in HELD_OUT) == (split == "heldout")]
    return "".join(parts[b] for b in keep)


def batch(data: torch.Tensor, size: int, length: int, *, repeat: float,
          generator: torch.Generator, segments: bool = False) -> torch.Tensor:
    """``(size, length)`` windows of ``data`` at random offsets. A fraction ``repeat`` of them
    repeat a passage: their second half replaced by their first, or with ``segments`` a span of
    random length (32 to half the window) copied right after itself at a random place, so that
    the earlier copy lies at no fixed distance and only matching on content finds it."""
    starts = torch.randint(0, data.numel() - length, (size,), generator=generator)
    ids = torch.stack([data[s:s + length] for s in starts.tolist()])
    copy = (torch.rand(size, generator=generator) < repeat).nonzero().flatten().tolist()
    half = length // 2
    for r in copy:
        if not segments:
            ids[r, half:2 * half] = ids[r, :half]
            continue
        span = int(torch.randint(32, half + 1, (1,), generator=generator))
        at = int(torch.randint(0, length - 2 * span + 1, (1,), generator=generator))
        ids[r, at + span:at + 2 * span] = ids[r, at:at + span]
    return ids


def lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats) over ``ids (B, N)``."""
    logits = model(input_ids=ids).logits[:, :-1]
    return F.cross_entropy(logits.float().transpose(1, 2), ids[:, 1:])


#: the curriculum, two stages of (steps, batch, length): short windows first, then the full
#: context. Stage 1 repeats the first half of a quarter of the windows; in it the model learnt
#: English bytes but no copying (the loss on a repeated half stayed the plain loss). Stage 2
#: continues from it with half of the windows repeating a span of random length at a random
#: place, so that only matching on content finds the earlier copy (an induction circuit).
SCHEDULE = ((900, 32, 256), (240, 8, 1024), (50, 2, 4096))
SCHEDULE_2 = ((500, 16, 512), (100, 8, 1024), (30, 2, 4096))


def train(config: KJVConfig = KJVConfig(), *, log=None):
    """Both stages from seed 0 (see :data:`SCHEDULE`)."""
    model = train_stage(build(config), SCHEDULE, lr=3e-3, repeat=0.25, seed=0, log=log)
    return train_stage(model, SCHEDULE_2, lr=1e-3, repeat=0.5, segments=True, seed=1, log=log)


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def train_stage(model, schedule, *, lr: float, repeat: float, seed: int,
                segments: bool = False, log=None):
    """One stage on the training books (AdamW, weight decay 0.01, linear warm-up then cosine
    decay over the stage), with transformers' ``sdpa`` attention."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data = encode(corpus("train"))
    model.set_attn_implementation("sdpa")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    total = sum(s for s, _, _ in schedule)
    warm = max(1, total // 20)

    def rate(step):
        if step < warm:
            return (step + 1) / warm
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warm) / (total - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    step = 0
    for steps, size, length in schedule:
        for _ in range(steps):
            ids = batch(data, size, length, repeat=repeat, generator=gen, segments=segments)
            loss = lm_loss(model, ids)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if log is not None and (step % 50 == 0 or step == total - 1):
                log(step, loss.item())
            step += 1
    return model.eval()


def heldout_loss(model, length: int, windows: int = 4, *, repeat: bool = False) -> float:
    """Mean next-byte loss (nats) on ``windows`` evenly spaced held-out windows of ``length``
    bytes; ``repeat=True`` measures only the second half of windows whose second half repeats
    their first (the copying the induction heads do)."""
    data = encode(corpus("heldout"))
    starts = torch.linspace(0, data.numel() - length - 1, windows).long().tolist()
    ids = torch.stack([data[s:s + length] for s in starts])
    half = length // 2
    if repeat:
        ids[:, half:2 * half] = ids[:, :half]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1].float()
    each = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return float((each[:, half:] if repeat else each).mean())
