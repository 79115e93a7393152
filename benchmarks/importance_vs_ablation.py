"""Does the one-backward head importance say which heads matter? SmolLM2-135M on 1,024 tokens of
King Lear: every head's gradient importance (inspect.importance.head_gradients) against the
loss each head's zero-ablation adds (one forward per head, 270 in all), and the loss of
ablating the 10 most important heads together against the 10 least important and against 10
random heads (20 draws).

    python benchmarks/importance_vs_ablation.py            # about 15 minutes on 2 cores
    python benchmarks/importance_vs_ablation.py --n 512

Writes benchmarks/results/importance_vs_ablation.json and prints a Markdown summary: the
Spearman rank correlation (scipy.stats.spearmanr) between the importance and the ablation's
added loss, and the group ablations.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "importance_vs_ablation.json"


def main() -> None:
    import torch
    from scipy.stats import spearmanr

    from attnlab.inspect.ablation import ablate_heads, head_importance
    from attnlab.inspect.importance import head_gradients

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="tokens of the text")
    parser.add_argument("--draws", type=int, default=20, help="random groups of 10 heads")
    args = parser.parse_args()
    from bench_importance import smollm2_on_lear

    model, tok, ids = smollm2_on_lear(args.n)

    def loss() -> float:
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0, :-1].double()
        return float(-logits.log_softmax(-1).gather(-1, ids[0, 1:, None]).mean())

    t0 = time.perf_counter()
    grad = head_gradients(model, ids)
    t_grad = time.perf_counter() - t0
    t0 = time.perf_counter()
    added = head_importance(model, loss)                 # (L, H): ablated minus intact
    t_abl = time.perf_counter() - t0
    imp, add = grad.importance.flatten(), added.flatten()
    rho = spearmanr(imp.numpy(), add.numpy())
    rho_abs = spearmanr(imp.numpy(), add.abs().numpy())
    base = loss()
    n_heads = added.shape[1]
    order = imp.argsort(descending=True).tolist()

    def group(flat: list[int]) -> float:
        with ablate_heads(model, [divmod(i, n_heads) for i in flat]):
            return loss() - base

    top, bottom = group(order[:10]), group(order[-10:])
    rng = random.Random(0)
    randoms = [group(rng.sample(range(len(order)), 10)) for _ in range(args.draws)]
    by_ablation = added.flatten().argsort(descending=True).tolist()
    best = group(by_ablation[:10])
    out = {"n": args.n, "loss": base, "spearman": rho.statistic, "spearman_p": rho.pvalue,
           "spearman_abs": rho_abs.statistic, "top10": top, "bottom10": bottom,
           "random10": randoms, "ablation_top10": best, "seconds_gradient": t_grad,
           "seconds_ablation": t_abl, "importance": grad.importance.tolist(),
           "ablation": added.tolist()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1))
    mean = sum(randoms) / len(randoms)
    print(f"| SmolLM2, {args.n} tokens, loss {base:.3f} nats | |\n|---|---|")
    print(f"| Spearman (importance, added loss) | {rho.statistic:.3f} (p = {rho.pvalue:.1e}) |")
    print(f"| Spearman (importance, absolute added loss) | {rho_abs.statistic:.3f} |")
    print(f"| ablate the 10 most important | +{top:.3f} nats |")
    print(f"| ablate the 10 least important | {bottom:+.3f} nats |")
    print(f"| ablate 10 random heads ({args.draws} draws) | mean {mean:+.3f}, "
          f"range {min(randoms):+.3f} to {max(randoms):+.3f} |")
    print(f"| ablate the 10 whose single ablation costs most | +{best:.3f} nats |")
    print(f"| time: one backward / 270 ablations | {t_grad:.1f} s / {t_abl:.0f} s |")


if __name__ == "__main__":
    main()
