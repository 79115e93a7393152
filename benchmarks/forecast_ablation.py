"""The hybrid forecaster's ablation in docs/applied.md: for each bundled real series, the base
alone, base + attention (the default), base + mean pooling and the network without a base,
each network over 5 seeds, beside seasonal naive, ETS and AR (all refitted at every origin).

    python benchmarks/forecast_ablation.py [--series co2 sunspots elnino unemployment]
                                           [--seeds 5] [--out benchmarks/results/ablation.json]

Prints one Markdown table per series and the goal's verdicts; the defaults of
``attnlab fit forecast --example NAME`` throughout (nothing tuned on the evaluation origins).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from attnlab.models.datasets import load_series
from attnlab.models.forecast import AttentionForecaster
from attnlab.models.forecast.ablation import ablation


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", nargs="+", default=["co2", "sunspots", "elnino", "unemployment"])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/ablation.json"))
    args = p.parse_args()
    torch.set_num_threads(1)               # small networks: one thread is the fastest (busy.md)
    results, lines = {}, []
    for name in args.series:
        ex = load_series(name)
        t0 = time.perf_counter()
        model = AttentionForecaster(horizon=ex.horizon, season=ex.season)
        res = ablation(model, ex.y.to_numpy(), n_origins=ex.n_origins,
                       seeds=range(args.seeds), series=name, progress=print)
        secs = time.perf_counter() - t0
        s = res.summary()
        best, best_v = res.best_baseline()
        hybrid = s["base + attention"]["mean"]
        results[name] = {"base": res.base, "mase": res.mase, "summary": s,
                         "settings": res.settings, "seconds": secs}
        lines += [f"### {name}: {ex.description}", "",
                  f"{len(ex.y)} observations, horizon {ex.horizon}, season {ex.season}, "
                  f"{ex.n_origins} origins; base chosen by `auto`: **{res.base}**; "
                  f"{secs:.0f} s.", "", res.table(), "",
                  f"hybrid {hybrid:.3f} vs best baseline {best} {best_v:.3f}: "
                  + ("at or below" if hybrid <= best_v else "above")
                  + f"; attention {hybrid:.3f} vs mean pooling "
                  f"{s['base + mean pooling']['mean']:.3f}: "
                  + ("attention better" if hybrid < s["base + mean pooling"]["mean"]
                     else "attention not better"), ""]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps({"results": results, "markdown": text}, indent=1) + "\n")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
