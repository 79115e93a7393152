"""The single-series forecaster at its defaults on M3 (or M1, Tourism), beside the statistics
inside it.

    python benchmarks/forecast_default_m3.py [--dataset m3|m1|tourism] [--kinds monthly]
        [--every 5] [--jobs 2] [--json out.json]

Each series of the sample (every ``--every``-th of each frequency, in the data's order, fixed
before the first run) is fitted on its training part with ``AttentionForecaster()``'s
defaults (only the horizon and season are given) and forecasts the competition's held-out
part. Beside it, on the same split: ETS, ARIMA and Theta (attnlab's statsmodels bases), their
median (the ensemble the default base is), and the former default ``base="auto"``. MASE
divides by the training part's in-sample seasonal-naive error; the paired t-test is over the
series. Nothing here was tuned on these series: the default base was chosen from the M3
sample's first run, and the report keeps every run's numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

SEASON = {"yearly": 1, "quarterly": 4, "monthly": 12, "other": 1}


def one(args) -> dict:
    """The MASE of every method on one series (run in a worker process)."""
    import torch

    from attnlab.models.forecast import AttentionForecaster

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_m3 import _baselines, scores

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    sn, x, y, m = args
    h = len(y)
    base, _ = _baselines(x, h, m)
    row = {"sn": sn, "n": len(x)}
    for k in ("ets", "arima", "theta", "ensemble"):
        row[k] = scores(x, y, base[k], m)[1]
    for name, kw in (("default", {}), ("auto", {"base": "auto"})):
        t = time.perf_counter()
        f = AttentionForecaster(horizon=h, season=m if m > 1 else None, **kw).fit(x)
        row[name] = scores(x, y, f.predict(), m)[1]
        row[f"{name}_w"] = float(f.shrink_)
        row[f"{name}_s"] = time.perf_counter() - t
    return row


def main() -> None:
    from concurrent.futures import ProcessPoolExecutor

    from scipy.stats import ttest_rel

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_m3 import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="m3", choices=["m3", "m1", "tourism"])
    p.add_argument("--kinds", default="", help="comma-separated frequencies (default: all)")
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    groups = load(a.dataset)
    report = {}
    for kind in [k for k in a.kinds.split(",") if k] or list(groups):
        series = groups[kind][::a.every]
        m = SEASON[kind] if a.dataset == "m3" else int(series[0].period)
        work = [(s.sn, np.asarray(s.x, float), np.asarray(s.xx, float), m) for s in series]
        t0 = time.perf_counter()
        with ProcessPoolExecutor(a.jobs) as pool:
            rows = list(pool.map(one, work, chunksize=4))
        mean = {k: float(np.mean([r[k] for r in rows]))
                for k in ("ets", "arima", "theta", "ensemble", "default", "auto")}
        d = np.array([r["default"] for r in rows])
        e = np.array([r["ensemble"] for r in rows])
        report[kind] = {"series": len(rows), "mean_MASE": mean,
                        "default_over_ensemble": mean["default"] / mean["ensemble"],
                        "p_default_vs_ensemble": float(ttest_rel(d, e).pvalue),
                        "network_used": float(np.mean([r["default_w"] > 0 for r in rows])),
                        "seconds": time.perf_counter() - t0}
        print(f"{kind}: {len(rows)} series, MASE default {mean['default']:.4f}, ensemble "
              f"{mean['ensemble']:.4f} ({mean['default'] / mean['ensemble']:.3f}x, paired "
              f"p = {report[kind]['p_default_vs_ensemble']:.3f}), ets {mean['ets']:.4f}, "
              f"arima {mean['arima']:.4f}, theta {mean['theta']:.4f}, auto {mean['auto']:.4f}; "
              f"network in use on {report[kind]['network_used']:.0%}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
