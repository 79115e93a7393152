"""The needle, asked of importance and relevance: which heads and which tokens the loss of
SmolLM2-135M's answer depends on, at 2k, 4k and 8k tokens, on CPU.

    python benchmarks/needle_importance.py                       # 2,048, 4,096, 8,192
    python benchmarks/needle_importance.py --n 2048 --trials 2

For each length and trial: a needle ("The special magic number is 4817.") at a random depth of
a KJV haystack (attnlab's held-out Acts), asked through the chat template as
:func:`attnlab.inspect.retrieval.needle_test` asks it; the model answers greedily. Then one
:func:`attnlab.inspect.importance.head_gradients` call with ``target=`` the answer's tokens and
``relevance=True`` gives every head's importance for the answer's loss and every key's
relevance. Reported, for each:

* the rank (of 270) of each retrieval head the census found (docs/inspect.md: L23H2 and the
  induction heads L17H3, L17H4, L18H6, L18H7), and how many of them are in the top 10 and top
  27 (the top 10%);
* the best rank of a needle digit among the prompt's tokens by relevance (the answer's own
  tokens left out), and whether a digit is in the top 5%.

Results: a Markdown table on stdout and benchmarks/results/needle_importance.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "needle_importance.json"
RETRIEVAL_HEADS = [(23, 2), (17, 3), (17, 4), (18, 6), (18, 7)]


def run(lengths, trials: int, seed: int) -> list[dict]:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_importance import smollm2_on_lear
    from smollm2_study import kjv_text

    from attnlab.inspect.importance import head_gradients
    from attnlab.inspect.retrieval import _needle_tokens, needle_prompt

    model, tok, _ = smollm2_on_lear(128)
    hay = tok(kjv_text()[:200000])["input_ids"]
    rng = random.Random(seed)
    overhead = needle_prompt(tok, [], 0.5, "1234").shape[1] + 4
    rows = []
    for n in lengths:
        for trial in range(trials):
            number = "".join(rng.sample("123456789", 4))
            start = rng.randrange(0, len(hay) - n + 1)
            depth = rng.uniform(0.1, 0.9)
            prompt = needle_prompt(tok, hay[start:start + n - overhead - 24], depth, number)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(prompt, max_new_tokens=24, do_sample=False,
                                     pad_token_id=tok.eos_token_id)
            said = tok.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
            ids = out[0].tolist()
            p = prompt.shape[1]
            # the answer's tokens up to the last digit of the number, where the model said it
            digits = [i for i in range(p, len(ids)) if tok.decode([ids[i]]).strip().isdigit()]
            end = (digits[-1] + 1) if digits else len(ids)
            t1 = time.perf_counter()
            imp = head_gradients(model, out[:, :end], target=(p, end), relevance=True)
            seconds = time.perf_counter() - t1
            order = imp.importance.abs().flatten().argsort(descending=True).tolist()
            heads = imp.importance.shape[1]
            rank = {(i // heads, i % heads): r + 1 for r, i in enumerate(order)}
            rel = imp.token_relevance()[:p]
            by_rel = rel.argsort(descending=True).tolist()
            needle = _needle_tokens(tok, ids, number)
            needle_pos = [j for t, j in needle.items() if tok.decode([t]).strip().isdigit()
                          and j < p]
            best = min((by_rel.index(j) + 1 for j in needle_pos), default=None)
            row = {"n": int(out[:, :end].shape[1]), "trial": trial + 1, "number": number,
                   "said": said.strip(), "answered": number in said, "depth": round(depth, 2),
                   "generate_s": round(t1 - t0, 1), "importance_s": round(seconds, 1),
                   "retrieval_ranks": {f"L{la}H{h}": rank[(la, h)]
                                       for la, h in RETRIEVAL_HEADS},
                   "top10": [f"L{i // heads}H{i % heads}" for i in order[:10]],
                   "needle_best_rank": best, "prompt_tokens": p,
                   "needle_in_top5pct": best is not None and best <= max(1, round(0.05 * p)),
                   "top_tokens": [[j, tok.decode([ids[j]])] for j in by_rel[:8]]}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="length (repeatable)")
    parser.add_argument("--trials", type=int, default=1, help="needles per length")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = run(args.n or [2048, 4096, 8192], args.trials, args.seed)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1))
    names = [f"L{la}H{h}" for la, h in RETRIEVAL_HEADS]
    print("| tokens | answered | " + " | ".join(f"{x} rank" for x in names)
          + " | retrieval heads in top 10 / top 27 | needle digit's best relevance rank "
          "(of prompt tokens) | importance s |")
    print("|---" * (len(names) + 5) + "|")
    for r in rows:
        ranks = [r["retrieval_ranks"][x] for x in names]
        print(f"| {r['n']:,} | {'yes' if r['answered'] else 'no'} ({r['said']!r}) | "
              + " | ".join(str(x) for x in ranks)
              + f" | {sum(x <= 10 for x in ranks)} / {sum(x <= 27 for x in ranks)} | "
              f"{r['needle_best_rank']} of {r['prompt_tokens']:,} | {r['importance_s']} |")


if __name__ == "__main__":
    main()
