"""Is it the attention that helps? The hybrid forecaster's ablation over seeds.

For one series, the rolling-origin backtest
(:func:`~attnlab.models.forecast.backtest.rolling_origin`) of four variants that differ in one
thing each, every network variant over several seeds:

* ``base alone``: the statistical base the default chooses (``base="auto"`` on the data before
  the first origin), refitted at every origin: the model with its network removed;
* ``base + attention``: the default hybrid (the network corrects the base);
* ``base + mean pooling``: the same network with uniform weights over the window instead of
  attention;
* ``network, no base``: the attention network predicting the series itself (``base="none"``);

beside the baselines (seasonal naive, ETS, AutoReg, refitted at every origin). MASE per seed,
its mean and standard deviation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone

from attnlab.models.forecast.backtest import rolling_origin
from attnlab.models.forecast.baselines import BASELINES, forecast_errors

VARIANTS = ("base + attention", "base + mean pooling", "network, no base")


@dataclass
class AblationResult:
    """MASE of each variant per seed (``mase[variant]``: one value per seed; the base alone
    and the baselines are deterministic: one value), the base the default chose, and the
    settings."""

    series: str
    base: str
    mase: dict[str, list[float]] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    settings: dict = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean and spread of each variant's MASE over the seeds."""
        return {k: {"mean": float(np.mean(v)), "std": float(np.std(v)) if len(v) > 1 else 0.0,
                    "n": len(v)} for k, v in self.mase.items()}

    def best_baseline(self) -> tuple[str, float]:
        """The traditional method with the lowest MASE."""
        rows = {k: v[0] for k, v in self.mase.items()
                if k in ("seasonal_naive", "ets", "ar")}
        name = min(rows, key=rows.get)
        return name, rows[name]

    def table(self) -> str:
        """Markdown: variant, MASE mean ± std over the seeds, the seeds' values."""
        out = ["| method | MASE (mean ± std) | per seed |", "|---|---:|---|"]
        for name, s in sorted(self.summary().items(), key=lambda kv: kv[1]["mean"]):
            vals = self.mase[name]
            spread = f" ± {s['std']:.3f}" if s["n"] > 1 else ""
            per = ", ".join(f"{v:.3f}" for v in vals) if name in VARIANTS else "(deterministic)"
            out.append(f"| {name} | {s['mean']:.3f}{spread} | {per} |")
        return "\n".join(out)


def _baseline_mase(name: str, y: np.ndarray, bt, m: int) -> float:
    """MASE of the baseline ``name`` refitted at the backtest ``bt``'s origins."""
    H = bt.actual.shape[1]
    fc = np.stack([BASELINES[name](y[:t], H, m) for t in bt.origins])
    t0 = int(bt.origins[0])
    scale = float(np.mean(np.abs(y[m:t0] - y[:t0 - m])))
    return forecast_errors(bt.actual, fc, scale)["MASE"]


def ablation(forecaster, y: np.ndarray, *, n_origins: int, seeds=(0, 1, 2, 3, 4),
             series: str = "series", progress=None) -> AblationResult:
    """Run the ablation of module docstring for an unfitted ``AttentionForecaster`` (its
    settings, with ``base`` as given, usually ``"auto"``) on the series ``y``."""
    y = np.asarray(y, dtype=float)
    seeds = tuple(int(s) for s in seeds)
    res = AblationResult(series, "", seeds=seeds,
                         settings={"horizon": forecaster.horizon, "season": forecaster.season,
                                   "lookback": forecaster.effective_lookback,
                                   "n_origins": n_origins, "encoder": forecaster.encoder})
    variants = {"base + attention": {},
                "base + mean pooling": {"pool": "mean"},
                "network, no base": {"base": "none", "pool": "attention"}}
    for i, seed in enumerate(seeds):
        for name, change in variants.items():
            model = clone(forecaster).set_params(seed=seed, **change)
            first = i == 0 and name == "base + attention"
            bt = rolling_origin(model, y, None, n_origins=n_origins,
                                baselines=("seasonal_naive", "ets", "ar") if first else ())
            res.mase.setdefault(name, []).append(bt.metrics["attention"]["MASE"])
            if first:
                res.base = bt.model.base_name_
                for b in ("seasonal_naive", "ets", "ar"):
                    res.mase[b] = [bt.metrics[b]["MASE"]]
                if res.base in bt.metrics:
                    alone = bt.metrics[res.base]["MASE"]
                else:                       # the chosen base refitted at the same origins
                    alone = _baseline_mase(res.base, y, bt, model.effective_season)
                res.mase[f"base alone ({res.base})"] = [alone]
            if progress is not None:
                progress(f"{series}: seed {seed}, {name}: MASE "
                         f"{bt.metrics['attention']['MASE']:.3f}")
    return res
