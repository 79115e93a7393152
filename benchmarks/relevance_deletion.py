"""Does token relevance find the tokens a prediction needs? SmolLM2-135M on 1,024 tokens of King
Lear: the relevance each token receives for the loss of the last 64 tokens (summed over every
layer and head, from the backward's own tiles: inspect.importance.head_gradients(...,
relevance=True)); the 5% most relevant tokens before the target masked out (attention mask,
not removed) against as many random tokens (20 draws) and against the 5% that receive the
most raw attention (the census's column sums, every layer and head).

    python benchmarks/relevance_deletion.py                # a few minutes on 2 cores

Writes benchmarks/results/relevance_deletion.json and prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "relevance_deletion.json"


def main() -> None:
    import torch

    from attnlab.inspect import census
    from attnlab.inspect.importance import head_gradients

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="tokens of the text")
    parser.add_argument("--target", type=int, default=64, help="tokens predicted at the end")
    parser.add_argument("--draws", type=int, default=20, help="random deletions")
    args = parser.parse_args()
    from bench_importance import smollm2_on_lear

    model, tok, ids = smollm2_on_lear(args.n)
    n = ids.shape[1]
    start = n - args.target

    def loss(drop: list[int]) -> float:
        mask = torch.ones(1, n, dtype=torch.long)
        mask[0, drop] = 0
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        logp = logits[0, start - 1:n - 1].double().log_softmax(-1)
        return float(-logp.gather(-1, ids[0, start:, None]).mean())

    t0 = time.perf_counter()
    imp = head_gradients(model, ids, target=(start, n), relevance=True)
    seconds = time.perf_counter() - t0
    k = max(1, round(0.05 * start))                       # 5% of the tokens before the target
    candidates = list(range(1, start))                    # the first token (the sink) kept
    rel = imp.token_relevance()[1:start]
    by_relevance = (rel.argsort(descending=True)[:k] + 1).tolist()
    c = census(model, input_ids=ids, pooled=None)
    received = c.stats["received"].double().sum((0, 1))[1:start]
    by_attention = (received.argsort(descending=True)[:k] + 1).tolist()
    base = loss([])
    rng = random.Random(0)
    randoms = [loss(rng.sample(candidates, k)) - base for _ in range(args.draws)]
    out = {"n": n, "target": [start, n], "k": k, "loss": base,
           "relevance": loss(by_relevance) - base, "attention": loss(by_attention) - base,
           "random": randoms, "seconds_relevance": seconds,
           "overlap": len(set(by_relevance) & set(by_attention))}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1))
    mean = sum(randoms) / len(randoms)
    print(f"| SmolLM2, {n} tokens, the last {args.target} predicted (loss {base:.3f} nats), "
          f"{k} tokens masked | added loss |\n|---|---|")
    print(f"| the {k} most relevant | {out['relevance']:+.3f} nats |")
    print(f"| the {k} that receive the most attention | {out['attention']:+.3f} nats |")
    print(f"| {k} random ({args.draws} draws) | mean {mean:+.3f}, range {min(randoms):+.3f} "
          f"to {max(randoms):+.3f} |")
    print(f"| overlap of the two sets | {out['overlap']} of {k} |")
    print(f"| time: importance and relevance, one backward on the eager tiles | "
          f"{seconds:.1f} s |")


if __name__ == "__main__":
    main()
