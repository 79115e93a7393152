"""The census of the shipped decoder (zoo ``kjv``) at long context, and its labels checked by
ablation.

    python benchmarks/kjv_study.py                 # census at 4k, 8k, 16k; ablation at 2k
    python benchmarks/kjv_study.py --lengths 4096 --report out/kjv_census.html

1. The census of the held-out books (Acts, then Revelation; never in training) at each length:
   every head's label and means, the time and the peak memory.
2. Every head ablated alone (its output zeroed, :func:`attnlab.inspect.ablation.ablate_heads`),
   on two held-out texts of 2,048 bytes: plain text (the next-byte loss) and a repeated one
   (1,024 bytes twice: the loss on the second copy, which an induction circuit predicts). A
   label is borne out when its heads' mean loss increase is larger than the mean over the heads
   without a label of their own (``heterogeneous`` and ``broad``): for induction heads on the
   repeated text, for previous-token heads on the repeated text (they feed the induction heads), for
   local heads on the plain text; sink heads are expected to cost little (their weight parks on
   the first byte).

Results: a Markdown summary on stdout and benchmarks/results/kjv_study.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).parent / "results" / "kjv_study.json"


def losses(model, ids: torch.Tensor, half: int | None) -> float:
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1].float()
    each = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return float(each[:, half:].mean() if half else each.mean())


def fmt(x) -> str:
    return "-" if x is None else f"{x:+.4f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384])
    p.add_argument("--ablate", type=int, default=2048, help="length of the ablation texts")
    p.add_argument("--report", type=Path, help="also write the census report of the first "
                   "length here")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    from attnlab import zoo
    from attnlab.bench import machine
    from attnlab.inspect import census
    from attnlab.inspect.ablation import ablate_heads
    from attnlab.zoo import kjv

    model, tok = zoo.load("kjv"), kjv.tokenizer()
    text = kjv.corpus("heldout")
    ids = kjv.encode(text)[None]
    out = {"machine": machine(), "census": [], "ablation": {}}
    for n in args.lengths:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        rows = [n // 2, n - 1]
        c = census(model, tok, input_ids=ids[:, :n], pooled=256, rows=rows, sharpest=2,
                   name="kjv")
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if args.report is not None and n == args.lengths[0]:
            c.save(args.report, {"text": f"Acts 1:1 onwards, the first {n} bytes (held out)"})
        entry = {"n": n, "seconds": seconds, "peak_mib": peak, "rss_before_mib": base,
                 "labels": c.labels, "counts": c.counts(), "notes": c.notes,
                 "summary": {k: [[round(float(x), 4) for x in row] for row in v]
                             for k, v in c.summary.items()}}
        out["census"].append(entry)
        print(f"census at {n}: {seconds:.1f} s, {c.counts()}", flush=True)
    # ablation, inside the trained context
    m = args.ablate
    plain = ids[:, :m]
    start = ids.shape[1] // 2                        # Revelation's side of the held-out text
    rep = ids[:, start:start + m // 2]
    rep = torch.cat([rep, rep], 1)
    model.set_attn_implementation("sdpa")
    base_plain, base_rep = losses(model, plain, None), losses(model, rep, m // 2)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    d_plain = torch.zeros(layers, heads)
    d_rep = torch.zeros(layers, heads)
    for layer in range(layers):
        for head in range(heads):
            with ablate_heads(model, [(layer, head)]):
                d_plain[layer, head] = losses(model, plain, None) - base_plain
                d_rep[layer, head] = losses(model, rep, m // 2) - base_rep
    labels = out["census"][0]["labels"]              # the census at the first length
    flat = [(layer, head, labels[layer][head]) for layer in range(layers)
            for head in range(heads)]
    others = [(la, h) for la, h, lab in flat if lab in ("heterogeneous", "broad")]

    def mean(t, pairs):
        return float(torch.stack([t[la, h] for la, h in pairs]).mean()) if pairs else None

    verdicts = {}
    for label, which in (("induction", "repeated"), ("previous token", "repeated"),
                         ("local", "plain"), ("sink", "plain")):
        pairs = [(la, h) for la, h, lab in flat if lab == label]
        t = d_rep if which == "repeated" else d_plain
        verdicts[label] = {"heads": pairs, "text": which, "mean_increase": mean(t, pairs),
                           "unlabelled_mean_increase": mean(t, others)}
    out["ablation"] = {"length": m, "loss_plain": base_plain, "loss_repeated_second": base_rep,
                       "increase_plain": d_plain.tolist(), "increase_repeated": d_rep.tolist(),
                       "verdicts": verdicts}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_name(RESULTS.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(RESULTS)
    print(f"\nmachine: {machine()}\n")
    print("| N | census s | peak MiB | labels |\n|---:|---:|---:|---|")
    for e in out["census"]:
        print(f"| {e['n']} | {e['seconds']:.1f} | {e['peak_mib']:.0f} | "
              + ", ".join(f"{k}: {v}" for k, v in e["counts"].items()) + " |")
    print(f"\nablation at {m} bytes: loss {base_plain:.3f} (plain), {base_rep:.3f} (second copy)")
    print("| label | heads | text | mean loss increase | unlabelled heads' mean |\n"
          "|---|---|---|---:|---:|")
    for label, v in verdicts.items():
        print(f"| {label} | {', '.join(f'L{a}H{b}' for a, b in v['heads']) or 'none'} | "
              f"{v['text']} | {fmt(v['mean_increase'])} | "
              f"{fmt(v['unlabelled_mean_increase'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
