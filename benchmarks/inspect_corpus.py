"""The corpus study of docs/inspect.md: all-MiniLM-L6-v2 over sentence pairs from bundled text.

    python benchmarks/inspect_corpus.py [--pairs 240] [--out docs/img]

Text that ships with the installed packages, so nothing downloads: the dataset descriptions of
scikit-learn (``sklearn/datasets/descr/*.rst``) and the docstrings of Python's standard library
modules. Consecutive sentences of 5 to 40 words become (sentence A, sentence B) pairs. Prints
the numbers quoted in docs/inspect.md and writes its figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnlab.inspect.corpus import pairs, sentences  # noqa: F401  (sentences: bench_inspect)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=240)
    p.add_argument("--out", type=Path, default=Path("docs/img"))
    args = p.parse_args()

    from rich.progress import Progress

    from attnlab.inspect.run import inspect_texts
    from attnlab.plots import figure
    from attnlab.plots.inspect import save_embedding

    corpus = pairs(args.pairs)
    with Progress(transient=True) as progress:
        task = progress.add_task("inspecting pairs", total=len(corpus))
        ins = inspect_texts(corpus, progress=lambda i: progress.update(task, completed=i))
    m = ins.metrics
    per_layer = {k: [round(float(v), 3) for v in getattr(m, k).mean(1)]
                 for k in ("sep", "cls", "punct", "sink_mass", "within_segment", "entropy_ratio")}
    prev = [(l, h, round(float(m.prev_mass[l, h]), 2)) for l in range(ins.layers)
            for h in range(ins.heads) if float(m.prev_mass[l, h]) > 0.5]
    nxt = [(l, h, round(float(m.next_mass[l, h]), 2)) for l in range(ins.layers)
           for h in range(ins.heads) if float(m.next_mass[l, h]) > 0.5]
    top_prev = sorted(((round(float(m.prev_mass[l, h]), 2), l, h) for l in range(ins.layers)
                       for h in range(ins.heads)), reverse=True)[:5]
    top_next = sorted(((round(float(m.next_mass[l, h]), 2), l, h) for l in range(ins.layers)
                       for h in range(ins.heads)), reverse=True)[:5]
    result = {"pairs": len(corpus), "mean_tokens": sum(len(a.split()) + len(b.split())
                                                      for a, b in corpus) / len(corpus),
              "per_layer": per_layer, "prev_heads_over_50": prev, "next_heads_over_50": nxt,
              "top_prev": top_prev, "top_next": top_next,
              "js": {k: round(v, 3) for k, v in ins.layer_summary.items()},
              "labels": ins.taxonomy.counts(), "duplicates": len(ins.taxonomy.duplicates),
              "near_uniform": ins.taxonomy.near_uniform}
    print(json.dumps(result, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    with figure(args.out / "inspect_token_mass.png", figsize=(7, 4), dpi=110) as fig:
        ax = fig.add_subplot()
        layers = list(range(ins.layers))
        for key, label in (("sep", "[SEP]"), ("cls", "[CLS]"), ("punct", "punctuation"),
                           ("within_segment", "own sentence")):
            ax.plot(layers, per_layer[key], marker="o", label=label)
        ax.set_xlabel("layer")
        ax.set_ylabel("mean attention mass")
        ax.set_ylim(0, 1)
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_title(f"all-MiniLM-L6-v2, {len(corpus)} sentence pairs: where attention goes")
    save_embedding(ins.xy, ins.taxonomy.labels, args.out)
    (args.out / "head_embedding.png").replace(args.out / "inspect_head_embedding.png")
    (args.out / "head_embedding.svg").unlink()
    (args.out / "inspect_corpus.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
