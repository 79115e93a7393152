"""The spatio-temporal forecaster's numbers in docs/applied.md.

    python benchmarks/spatiotemporal.py [--seeds 3] [--out benchmarks/results/spatiotemporal.json]

(a) The simulated crowd flow (models.spatiotemporal.simulated_crowd: 8 places on two streets,
    known upstream places and delays): MASE of the model with full spatial attention and with
    the street graph, against each place's seasonal naive, AR and the single-series
    AttentionForecaster; the share of the learned spatial attention on the true upstream
    places against the share under uniform attention.
(b) US employment by industry (15 series, monthly 2006-2015, vega_datasets): the same
    comparison without a graph.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from attnlab.models.datasets import load_panel
from attnlab.models.forecast import AttentionForecaster
from attnlab.models.forecast.backtest import rolling_origin
from attnlab.models.forecast.spatiotemporal import (
    SpatioTemporalForecaster,
    simulated_crowd,
    upstream_share,
)


def per_series_attention(Y, horizon, season, lookback, n_origins, seed):
    """MASE of one AttentionForecaster per series (scaled like the panel's: per series)."""
    vals = []
    for p in range(Y.shape[1]):
        f = AttentionForecaster(horizon=horizon, season=season, lookback=lookback, seed=seed,
                                base="seasonal_naive")
        vals.append(rolling_origin(f, Y[:, p], None, n_origins=n_origins,
                                   baselines=()).metrics["attention"]["MASE"])
    return float(np.mean(vals))


def run_case(label, Y, horizon, season, lookback, n_origins, seeds, adjacency=None,
             truth=None, epochs=150):
    rows = {}
    for graph in ([None] if adjacency is None else [None, adjacency]):
        name = "spatio-temporal" + ("" if graph is None else " (street graph)")
        mase, shares = [], []
        for seed in seeds:
            f = SpatioTemporalForecaster(horizon=horizon, season=season, lookback=lookback,
                                         max_epochs=epochs, seed=seed)
            r = f.backtest(Y, graph, n_origins=n_origins)
            mase.append(r["MASE"]["spatio-temporal"])
            if truth is not None and graph is None:
                r["model"].predict(Y)
                shares.append(upstream_share(r["model"].spatial_attention_, truth))
            base = r["MASE"]
            print(label, name, seed, round(mase[-1], 3), flush=True)
        rows[name] = mase
        if shares:
            rows["upstream share (learned, uniform)"] = [float(np.mean([s[0] for s in shares])),
                                                         float(shares[0][1])]
    rows["seasonal_naive"] = [base["seasonal_naive"]]
    rows["ar"] = [base["ar"]]
    rows["attention, one model per series"] = [
        per_series_attention(Y, horizon, season, lookback, n_origins, 0)]
    return rows


def table(rows):
    out = ["| method | MASE (mean ± std over seeds) |", "|---|---:|"]
    for k, v in rows.items():
        if k.startswith("upstream"):
            continue
        spread = f" ± {np.std(v):.3f}" if len(v) > 1 else ""
        out.append(f"| {k} | {np.mean(v):.3f}{spread} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/spatiotemporal.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    Y, adj, _ = simulated_crowd()
    crowd = run_case("crowd", Y, 3, 24, 24, 5, seeds, adjacency=adj, truth=adj)
    emp = load_panel("us_employment").to_numpy()
    employment = run_case("employment", emp, 6, 12, 24, 5, seeds)
    secs = time.perf_counter() - t0
    share = crowd["upstream share (learned, uniform)"]
    text = "\n".join([
        "**Simulated crowd flow** (8 places, 600 hourly steps, horizon 3, season 24, 5 origins)",
        "", table(crowd), "",
        f"Share of the spatial attention (full, no graph) on the true upstream places: "
        f"{share[0]:.3f}, against {share[1]:.3f} under uniform attention.", "",
        "**US employment by industry** (15 series, 120 months, horizon 6, season 12, "
        "5 origins)", "", table(employment), "", f"({secs:.0f} s in all)"])
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps({"crowd": crowd, "employment": employment, "markdown": text},
                              indent=1) + "\n")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
