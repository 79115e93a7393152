"""The forecaster with its defaults on nine bundled series, beside the traditional methods, on
the same rolling origins: MASE, sMAPE, and the coverage of its conformal intervals.

    python benchmarks/forecast_unseen.py [--out docs/img] [--json results.json]

The series were fixed before the first run: the project's four examples (co2, sunspots, elnino,
unemployment) and five that nothing in attnlab was tuned on, of other kinds: the Nile's annual
flow (statsmodels), US real GDP (quarterly, trending; statsmodels macrodata), Apple's monthly
share price (a random walk; vega_datasets stocks), Seattle's daily maximum temperature (weekly
season; vega_datasets) and San Francisco's hourly temperature (daily season, the last 60 days
of 2010; vega_datasets sf-temps). Every method forecasts from each origin with the history up
to it; the traditional methods are refitted at every origin, the forecaster is fitted once on
the data before the first origin (its default backtest). MASE divides by the in-sample
seasonal-naive MAE before the first origin; sMAPE is the symmetric MAPE (%).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.models.datasets import load_series
from attnlab.models.forecast import AttentionForecaster
from attnlab.models.forecast.baselines import BASELINES

METHODS = ("seasonal_naive", "ets", "arima", "theta", "combination")


def unseen(name: str):
    """(values, season, horizon, n_origins, description) of the five series never tuned on."""
    if name == "nile":
        from statsmodels.datasets import nile
        return nile.load_pandas().data["volume"].to_numpy(float), 1, 5, 6, \
            "Nile annual flow, 1871-1970"
    if name == "realgdp":
        from statsmodels.datasets import macrodata
        return macrodata.load_pandas().data["realgdp"].to_numpy(float), 4, 8, 6, \
            "US real GDP, quarterly, 1959-2009"
    from vega_datasets import local_data
    if name == "aapl":
        s = local_data.stocks()
        return s[s.symbol == "AAPL"].sort_values("date")["price"].to_numpy(float), 1, 6, 6, \
            "Apple monthly share price, 2000-2010"
    if name == "seattle":
        w = local_data.seattle_weather().sort_values("date")
        return w["temp_max"].to_numpy(float), 7, 14, 8, \
            "Seattle daily maximum temperature, 2012-2015"
    if name == "sf_hourly":
        t = local_data.sf_temps().sort_values("date")
        return t["temp"].to_numpy(float)[-24 * 60:], 24, 24, 8, \
            "San Francisco hourly temperature, last 60 days of 2010"
    raise ValueError(name)


def series(name: str):
    if name in ("co2", "sunspots", "elnino", "unemployment"):
        ex = load_series(name)
        return ex.y.to_numpy(float), ex.season, ex.horizon, ex.n_origins, ex.description
    return unseen(name)


def smape(actual, fc):
    return float(np.mean(200 * np.abs(fc - actual) / (np.abs(actual) + np.abs(fc))))


def run(name: str) -> dict:
    y, m, H, k, desc = series(name)
    origins = len(y) - H - H * np.arange(k)[::-1]
    t0 = int(origins[0])
    scale = float(np.mean(np.abs(y[m:t0] - y[:t0 - m])))
    actual = np.stack([y[t:t + H] for t in origins])
    fc = {name_: [] for name_ in (*METHODS, "forecaster")}
    cover = {0.8: [], 0.95: []}
    seconds = {}
    for meth in METHODS:
        start = time.perf_counter()
        for t in origins:
            fc[meth].append(BASELINES[meth](y[:t], H, m))
        seconds[meth] = time.perf_counter() - start
    start = time.perf_counter()
    model = AttentionForecaster(horizon=H, season=m if m > 1 else None).fit(y[:t0])
    for i, t in enumerate(origins):
        pred = model.predict(y=y[:t])
        (lo, hi), (lo95, hi95) = (model.interval_bounds(pred)[q] for q in (0.8, 0.95))
        fc["forecaster"].append(pred)
        cover[0.8].append(((actual[i] >= lo) & (actual[i] <= hi)).tolist())
        cover[0.95].append(((actual[i] >= lo95) & (actual[i] <= hi95)).tolist())
    seconds["forecaster"] = time.perf_counter() - start
    out = {"series": name, "description": desc, "n": len(y), "season": m, "horizon": H,
           "origins": k, "base": model.base_name_, "base_scores": model.base_scores_,
           "w": model.shrink_, "seconds": seconds, "mase": {}, "smape": {},
           "coverage": {str(q): float(np.mean(v)) for q, v in cover.items()}}
    for meth, v in fc.items():
        f = np.stack(v)
        out["mase"][meth] = float(np.mean(np.abs(f - actual))) / scale
        out["smape"][meth] = smape(actual, f)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None)
    p.add_argument("--only", default=None, help="comma-separated series")
    args = p.parse_args()
    names = ("co2", "sunspots", "elnino", "unemployment", "nile", "realgdp", "aapl", "seattle",
             "sf_hourly")
    if args.only:
        names = tuple(args.only.split(","))
    rows = []
    for n in names:
        r = run(n)
        rows.append(r)
        best = min(("seasonal_naive", "ets", "arima", "theta"), key=lambda k: r["mase"][k])
        print(f"{n}: base {r['base']}, w {r['w']:.2f}; MASE " + ", ".join(
            f"{k} {v:.3f}" for k, v in r["mase"].items())
            + f"; forecaster / best single ({best}) {r['mase']['forecaster'] / r['mase'][best]:.2f}"
            + f"; coverage 80% {r['coverage']['0.8']:.2f}, 95% {r['coverage']['0.95']:.2f}",
            flush=True)
    ratios = [r["mase"]["forecaster"] / min(r["mase"][k] for k in
                                            ("seasonal_naive", "ets", "arima", "theta"))
              for r in rows]
    print(f"geometric mean ratio to the best single method: "
          f"{math.exp(np.mean(np.log(ratios))):.3f}; worst {max(ratios):.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    pd.set_option("display.width", 200)


if __name__ == "__main__":
    main()
