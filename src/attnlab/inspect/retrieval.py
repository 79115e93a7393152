"""Retrieval heads (Wu et al. 2024): the heads that copy from far back in the context.

A needle, a sentence with a random number ("The special magic number is 7384."), is put at a
random depth of a haystack text; the model is asked for the number through its chat template
and answers greedily. A head's **retrieval score** is the share of the answer's tokens that
copy a token of the needle for which the head's largest weight, at the query that produces
the token, sits on that very token of the needle (Wu et al.'s definition; they call a head a
retrieval head above 0.1). The largest weights come from the census's per-row ``argmax``
(:func:`attnlab.inspect.census`), so the scores cost memory linear in the length at any
context.

    from attnlab.inspect.retrieval import needle_test
    res = needle_test(model, tokenizer, haystack_ids, lengths=(1024, 4096), trials=5)
    res.accuracy, res.scores                      # {length: share answered}, (L, H)
    c = census(model, tokenizer, text).relabel(retrieval_score=res.scores)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

NEEDLE = " The special magic number is {number}. "
QUESTION = "What is the special magic number in the text above? Answer with the number."
RETRIEVAL = 0.1         # Wu et al. (2024): a retrieval head scores above this


@dataclass
class NeedleResult:
    """``accuracy`` per haystack length (the share of trials whose answer holds the
    number), ``scores (L, H)`` (the retrieval score of every head over every copied token of
    every trial), ``copied`` (how many answer tokens copied a needle token) and the answers."""

    accuracy: dict[int, float]
    scores: torch.Tensor | None
    copied: int
    answers: list[tuple[int, str, str]] = field(default_factory=list)   # (length, number, said)


def needle_prompt(tokenizer, haystack_ids, depth: float, number: str) -> torch.Tensor:
    """``(1, N)`` ids: the haystack with the needle at ``depth`` (0 to 1) and the question,
    through the tokenizer's chat template with the prompt for the answer."""
    cut = int(len(haystack_ids) * depth)
    text = ("Here is a text.\n\n" + tokenizer.decode(haystack_ids[:cut])
            + NEEDLE.format(number=number) + tokenizer.decode(haystack_ids[cut:])
            + "\n\n" + QUESTION)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                        add_generation_prompt=True, return_tensors="pt")
    return ids["input_ids"] if hasattr(ids, "keys") else ids


def _needle_tokens(tokenizer, ids: list[int], number: str) -> dict[int, int]:
    """Each token of the needle's number -> its position in ``ids`` (the first occurrence
    after the needle's opening words)."""
    opening = tokenizer(NEEDLE.split("{number}")[0].rstrip())["input_ids"]
    for i in range(len(ids) - len(opening)):
        if ids[i:i + len(opening)] == opening:
            out = {}
            for j in range(i + len(opening), min(i + len(opening) + 2 * len(number) + 2,
                                                   len(ids))):
                out.setdefault(ids[j], j)
            return out
    return {}


def retrieval_hits(census_stats, ids: list[int], prompt: int, needle: dict[int, int],
                   tokenizer) -> tuple[torch.Tensor, int]:
    """``(hits (L, H), copied)``: over the answer's tokens (positions from ``prompt`` on) that
    copy a digit of the needle, how often each head's largest weight, at the query before the
    token, sits on the needle token it copies."""
    arg = census_stats["argmax"]                                     # (L, H, N)
    hits = torch.zeros(arg.shape[:2], dtype=torch.float64)
    copied = 0
    for p in range(prompt, len(ids)):
        src = needle.get(ids[p])
        if src is None or not tokenizer.decode([ids[p]]).strip().isdigit():
            continue
        copied += 1
        hits += (arg[..., p - 1] == src).double()
    return hits, copied


def needle_test(model, tokenizer, haystack_ids, lengths=(1024, 2048, 4096, 8192),
                trials: int = 5, seed: int = 0, new_tokens: int = 24) -> NeedleResult:
    """The needle in haystacks of each length (tokens of ``haystack_ids`` from a random
    start), ``trials`` times each with a random 4-digit number of distinct digits at a random
    depth: the model's accuracy by length and every head's retrieval score. A length is the
    whole sequence the model reads, prompt (haystack, needle, question, chat template) and
    answer together, so that 8,192 stays within SmolLM2's 8,192 positions."""
    from attnlab.inspect.census import census

    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ValueError(f"trials must be an int >= 1 (needles per length), got {trials!r}")
    bad = [n for n in lengths if not isinstance(n, int) or n < 128]
    if not lengths or bad:
        raise ValueError(f"lengths must be ints of at least 128 tokens (the whole prompt and "
                         f"answer), got {list(lengths)!r}")
    short = max(lengths)
    if len(haystack_ids) < short:
        raise ValueError(f"haystack_ids has {len(haystack_ids)} tokens; a haystack of {short} "
                         "needs at least as many: give a longer text or shorter lengths")
    rng = random.Random(seed)
    # what the needle, the question and the template add to a haystack, in tokens
    overhead = needle_prompt(tokenizer, [], 0.5, "1234").shape[1] + 4
    accuracy, answers = {}, []
    hits, copied = None, 0
    for n in lengths:
        right = 0
        for _ in range(trials):
            number = "".join(rng.sample("123456789", 4))
            start = rng.randrange(0, len(haystack_ids) - n + 1)
            prompt = needle_prompt(tokenizer,
                                   haystack_ids[start:start + n - overhead - new_tokens],
                                   rng.uniform(0.1, 0.9), number)
            with torch.no_grad():
                out = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.eos_token_id)
            said = tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
            right += number in said
            answers.append((n, number, said))
            ids = out[0].tolist()
            c = census(model, tokenizer, input_ids=out)
            h, k = retrieval_hits(c.stats, ids, prompt.shape[1],
                                  _needle_tokens(tokenizer, ids, number), tokenizer)
            hits = h if hits is None else hits + h
            copied += k
        accuracy[n] = right / trials
    scores = None if hits is None else (hits / max(copied, 1)).float()
    return NeedleResult(accuracy, scores, copied, answers)
