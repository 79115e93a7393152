"""The numbers in docs/applied.md: every bundled example through `attnlab fit` with the
defaults (nothing tuned on the evaluation origins or folds), summarized as Markdown.

    python benchmarks/applied.py [--out DIR]

Writes DIR/<example>/ (metrics, figures, model, LaTeX) and DIR/summary.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from attnlab.cli import main as cli


def run(out: Path) -> str:
    lines = []
    for name in ("co2", "sunspots", "elnino", "unemployment"):
        t0 = time.perf_counter()
        assert cli(["fit", "forecast", "--example", name, "--out", str(out / name)]) == 0
        m = json.loads((out / name / "metrics.json").read_text())
        lines.append(f"### {name} ({m['n_obs']} observations, horizon {m['horizon']}, season "
                     f"{m['season']}, {m['n_origins']} origins, {time.perf_counter() - t0:.0f} s)")
        lines.append("")
        lines.append("| method | MAE | RMSE | MAPE % | MASE |")
        lines.append("|---|---|---|---|---|")
        for method, v in sorted(m["backtest"].items(), key=lambda kv: kv[1]["MASE"]):
            lines.append(f"| {method} | {v['MAE']:.3f} | {v['RMSE']:.3f} | {v['MAPE']:.2f} | "
                         f"{v['MASE']:.3f} |")
        lines.append("")
    for name in ("diabetes", "breast_cancer", "wine"):
        t0 = time.perf_counter()
        assert cli(["fit", "tabular", "--example", name, "--out", str(out / name)]) == 0
        m = json.loads((out / name / "metrics.json").read_text())
        lines.append(f"### {name} ({m['rows']} rows, {m['features']} features, "
                     f"{m['folds']}-fold {m['scoring']}, {time.perf_counter() - t0:.0f} s)")
        lines.append("")
        lines.append(f"| model | mean {m['scoring']} | std | folds |")
        lines.append("|---|---|---|---|")
        for label, v in sorted(m["cv"].items(), key=lambda kv: -kv[1]["mean"]):
            folds = ", ".join(f"{s:.3f}" for s in v["folds"])
            lines.append(f"| {label} | {v['mean']:.4f} | {v['std']:.4f} | {folds} |")
        lines.append("")
    text = "\n".join(lines)
    (out / "summary.md").write_text(text)
    return text


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("out/applied"))
    print(run(p.parse_args().out))
