"""How hard seasonal naive is to beat on the yearly sunspot numbers 11 years ahead, measured
on the history before the evaluation origins of docs/applied.md (so nothing here looks at
them), and then on the evaluation origins with every model refitted at each origin.

    python benchmarks/sunspots_study.py [--out DIR] [--seeds 3] [--more]

``--more`` adds six further variants of the network before the evaluation period (about 8
minutes more).

Writes DIR/summary.md and DIR/sunspots_origins.png (MASE per origin and method).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from attnlab._files import write_text_atomic
from attnlab.models import AttentionForecaster
from attnlab.models.datasets import load_series
from attnlab.models.forecast.baselines import forecast_errors
from attnlab.plots import save_heatmap

VARIANTS = {"attention (defaults)": {}, "attention, lookback 11": {"lookback": 11},
            "attention, transformer": {"encoder": "transformer"}}
MORE = {"attention, lstm": {"encoder": "lstm"}, "attention, hidden 16": {"hidden_size": 16},
        "attention, lookback 22": {"lookback": 22}, "attention, lr 3e-4": {"lr": 3e-4},
        "attention, dropout 0.3, weight decay 1e-2": {"dropout": 0.3, "weight_decay": 1e-2},
        "attention, 30% validation, patience 50": {"val_fraction": 0.3, "patience": 50}}
BASELINES = ("seasonal_naive", "ar", "ets")


def study(ex, y: np.ndarray, n_origins: int, seeds: int,
          variants: dict) -> tuple[dict, dict, np.ndarray]:
    """Every method refitted at every origin of ``y``; returns ({method: MASE},
    {method: per-origin MASE}, the origins)."""
    forecasts, baselines = {}, BASELINES
    for label, kw in variants.items():
        runs = []
        for seed in range(seeds):
            f = AttentionForecaster(horizon=ex.horizon, season=ex.season, seed=seed, **kw)
            bt = f.backtest(y, n_origins=n_origins, baselines=baselines, refit=True)
            runs.append(bt.forecasts.pop("attention"))
            forecasts.update(bt.forecasts)                    # the baselines, first run only
            baselines = ()
        forecasts[f"{label}, seed 0"] = runs[0]
        forecasts[f"{label}, mean of {seeds} seeds"] = np.mean(runs, axis=0)
    forecasts["(seasonal_naive + ar) / 2"] = (forecasts["seasonal_naive"] + forecasts["ar"]) / 2
    m, t0 = ex.season, int(bt.origins[0])
    scale = float(np.mean(np.abs(y[m:t0] - y[:t0 - m])))
    total = {k: forecast_errors(bt.actual, v, scale)["MASE"] for k, v in forecasts.items()}
    per = {k: np.abs(v - bt.actual).mean(axis=1) / scale for k, v in forecasts.items()}
    return total, per, bt.origins


def table(total: dict) -> list[str]:
    sn = total["seasonal_naive"]
    lines = ["| method | MASE | vs seasonal naive |", "|---|---|---|"]
    for k, v in sorted(total.items(), key=lambda kv: kv[1]):
        lines.append(f"| {k} | {v:.3f} | {v / sn:.2f}x |")
    return lines


def plot(per: dict, origins: np.ndarray, years: np.ndarray, path: Path) -> None:
    # The ensembles of the main variants and the baselines (the others are in the table).
    keep = [k for k in per if not k.startswith("attention")
            or any(k.startswith(f"{v}, mean of") for v in VARIANTS)]
    mat = np.stack([per[k] for k in keep])
    save_heatmap(mat / mat[keep.index("seasonal_naive")], path,
            title="sunspots before 1954: each method's MAE / seasonal naive's MAE per origin "
                  "(blue: better than seasonal naive)",
            row_labels=keep, col_labels=[str(years[t]) for t in origins],
            xlabel="forecast origin (first forecast year); 11 years ahead from each",
            ylabel="", cmap="RdBu_r", vmin=0.0, vmax=2.0, annotate=True,
            colorbar_label="MAE ratio (saturates at 2)", figsize=(12.0, 4.2))


def run(out: Path, seeds: int, more: bool = False) -> str:
    ex = load_series("sunspots")
    y, years = ex.y.to_numpy(), ex.y.index.year.to_numpy()
    first_eval = len(y) - ex.horizon * ex.n_origins          # the docs' first origin (1954)
    n_tune = (first_eval - ex.horizon - 100) // ex.horizon + 1  # origins from 1800 on
    t = time.perf_counter()
    total, per, origins = study(ex, y[:first_eval], n_tune, seeds,
                                VARIANTS | (MORE if more else {}))
    plot(per, origins, years, out / "sunspots_origins.png")
    lines = [f"### Before the evaluation period: {n_tune} origins, "
             f"{years[origins[0]]}-{years[origins[-1]]}, every model refitted at every "
             f"origin ({time.perf_counter() - t:.0f} s)", ""] + table(total)
    t = time.perf_counter()
    total, _, _ = study(ex, y, ex.n_origins, seeds, {"attention (defaults)": {}})
    lines += ["", f"### Evaluation origins ({years[first_eval]}-{years[len(y) - ex.horizon]}), "
              f"every model refitted at every origin ({time.perf_counter() - t:.0f} s)", ""]
    lines += table(total)
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / "summary.md", text)
    return text


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("out/sunspots_study"))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--more", action="store_true", help="six more variants of the network")
    args = p.parse_args()
    print(run(args.out, args.seeds, args.more))
