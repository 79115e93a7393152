"""The paper's numbers, measured once for both languages.

:func:`context` reads a :class:`PaperInputs` (a fitted forecaster and what was measured on it)
and returns every number, verdict and choice the text needs, as plain values: which model
forecasts, the comparison with the baselines and its test, the coverage and whether it is off
beyond chance, the attention's typical cases, the ablation's verdict. The templates
(:mod:`~attnlab.models.forecast.paper.text`) only put these into words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PaperInputs:
    """What the paper is written from. ``model``: a fitted
    :class:`~attnlab.models.forecast.AttentionForecaster` or
    :class:`~attnlab.models.forecast.GlobalForecaster`; ``backtest``: for the first a
    :class:`~attnlab.models.forecast.backtest.BacktestResult` of its settings, for the second a
    :class:`~attnlab.models.forecast.evaluation.PanelResult` (None for a series too short
    for any backtest origin: the paper then says its accuracy is not measured); ``ablation``: an
    :class:`~attnlab.models.forecast.ablation.AblationResult` or None; ``sensitivity``:
    ``{setting: [(value, MASE), ...]}`` or None; ``figures``: ``{"architecture" | "attention"
    | "backtest": file}`` relative to the .tex file; ``origin_labels``: the rows of the
    comparison (backtest origins as dates or steps, or the panel's series); ``draft``: ``{lang:
    why the numbers are preliminary}`` (e.g. a quick run), printed on every page, or None;
    ``shown``: how many of a panel's series its forecast figure draws."""

    model: object
    backtest: object
    series: str
    origin_labels: list[str]
    figures: dict[str, str] = field(default_factory=dict)
    ablation: object = None
    sensitivity: dict | None = None
    y: object = None                      # the series, for the forecast-vs-actual figure
    draft: dict | None = None             # why the numbers are preliminary, per language
    shown: int = 0                        # series drawn in a panel's forecast figure


def is_panel(inp: PaperInputs) -> bool:
    """Whether the paper is on a global model judged over a panel of series."""
    return hasattr(inp.backtest, "per_series")


def pooling_verdict(ablation) -> tuple[str, float | None]:
    """Whether attention pooling differs from mean pooling in an ablation: ``("better" |
    "worse" | "noise" | "few", p)`` from a paired t-test over the seeds (``few``: fewer than 3
    seeds, no test; ``noise``: p >= 0.05). A difference is claimed only with a test."""
    from scipy.stats import ttest_rel

    a = np.asarray(ablation.mase["base + attention"], dtype=float)
    b = np.asarray(ablation.mase["base + mean pooling"], dtype=float)
    if len(a) < 3 or len(a) != len(b):
        return "few", None
    if np.allclose(a, b):
        return "noise", 1.0
    p = float(ttest_rel(a, b).pvalue)
    if p >= 0.05:
        return "noise", p
    return ("better" if a.mean() < b.mean() else "worse"), p


def _row_mase(inp: PaperInputs, method: str) -> np.ndarray:
    """MASE of each row of the comparison (origin or series) for ``method``."""
    bt = inp.backtest
    if is_panel(inp):
        return np.asarray(bt.per_series[method], dtype=float)
    m = bt.metrics["attention"]
    scale = m["MAE"] / m["MASE"] if m["MASE"] else 1.0
    err = np.abs(np.asarray(bt.forecasts[method]) - np.asarray(bt.actual, dtype=float))
    return err.mean(1) / scale


def comparison_test(inp: PaperInputs, best: str) -> dict | None:
    """The model against ``best`` row by row: ``{"stat", "p", "wins", "n", "kind"}``. Over a
    series' origins, the Diebold-Mariano test (Harvey et al.'s small-sample form) on the
    per-origin mean absolute errors; over a panel's series, whose errors are independent, a
    paired t-test on the series' MASE. None with fewer than 3 rows."""
    from scipy.stats import ttest_rel

    from attnlab.models.forecast.baselines import diebold_mariano

    bt = inp.backtest
    if best not in bt.forecasts or len(bt.actual) < 3:
        return None
    ours, theirs = _row_mase(inp, "attention"), _row_mase(inp, best)
    if is_panel(inp):
        if np.allclose(ours, theirs):
            stat, p = 0.0, 1.0
        else:
            r = ttest_rel(ours, theirs)
            stat, p = float(r.statistic), float(r.pvalue)
        kind = "paired"
    else:
        actual = np.asarray(bt.actual, dtype=float)
        stat, p = diebold_mariano(np.abs(bt.forecasts["attention"] - actual).mean(1),
                                  np.abs(bt.forecasts[best] - actual).mean(1))
        kind = "dm"
    return {"stat": stat, "p": p, "wins": int((ours < theirs).sum()), "n": len(ours),
            "kind": kind, "ours": ours, "theirs": theirs}


def coverage_off(cover: dict, n: int) -> list[tuple[float, bool]]:
    """``(level, too_narrow)`` for each level whose coverage over ``n`` test values is off
    its nominal level beyond chance (a two-sided binomial test at 5%)."""
    from scipy.stats import binomtest

    out = []
    for q, c in sorted(cover.items()):
        if not np.isfinite(c) or n < 1 or binomtest(round(c * n), n, q).pvalue >= 0.05:
            continue
        out.append((q, c < q))
    return out


def attention_cases(att: np.ndarray) -> dict | None:
    """What the attention of the comparison's rows shows: ``uniform`` (every weight within
    20% of 1/L) with its range, else the three lags with the most mean weight, their share,
    and the rows of the most concentrated and the most spread attention; None where no row
    holds attention (a base-only model: the series was too short for the network)."""
    if att.ndim != 2 or att.shape[1] == 0:
        return None
    att = att[np.isfinite(att).all(1)]
    if len(att) == 0:
        return None
    L = att.shape[1]
    lo, hi = float(att.min()), float(att.max())
    out = {"L": L, "n": len(att), "lo": lo, "hi": hi, "uniform": hi - lo < 0.2 / L}
    mean = att.mean(0)
    top = np.argsort(mean)[::-1][:3]
    ent = -(att * np.log(np.clip(att, 1e-12, None))).sum(1)
    out.update(lags=[L - int(j) for j in top], share=float(mean[top].sum()),
               typical={"concentrated": int(np.argmin(ent)), "spread": int(np.argmax(ent))})
    return out


def context(inp: PaperInputs) -> dict:
    """The numbers of the paper (see the module docstring)."""
    m, bt = inp.model, inp.backtest
    if bt is None:                 # a series too short for any backtest origin
        return {"panel": False, "L": m.effective_lookback, "H": m.horizon, "d": m.hidden_size,
                "m": m.effective_season, "encoder": m.encoder, "pool": m.pool,
                "w": float(getattr(m, "shrink_", 0.0)), "base": m.base_name_,
                "n_exog": getattr(m, "n_exog_", 0), "unmeasured": True,
                "n_obs": int(getattr(m, "n_obs_", 0) or len(np.asarray(inp.y))),
                "need": int(max(2 * m.effective_season, 4) + m.horizon),
                "test": None, "cases": None, "case_rows": np.zeros(0, dtype=int)}
    metrics = bt.metrics
    panel = is_panel(inp)
    best = min((k for k in metrics if k != "attention"), key=lambda k: metrics[k]["MASE"])
    att = np.asarray(bt.attention, dtype=float)
    # the rows with attention: all of a single series' where the network ran, none where the
    # forecast is the base's alone (every row NaN), the networked series' of a panel
    keep = (np.isfinite(att).all(1) if att.ndim == 2 and att.shape[1]
            else np.zeros(len(att), dtype=bool))
    c = {
        "panel": panel, "L": m.effective_lookback, "H": m.horizon, "d": m.hidden_size,
        "m": m.effective_season, "encoder": m.encoder, "pool": m.pool,
        "w": float(getattr(m, "shrink_", 1.0)), "best": best,
        "ours": metrics["attention"]["MASE"], "theirs": metrics[best]["MASE"],
        "smape": metrics["attention"].get("sMAPE"),
        "base": (getattr(m, "base_name_", m.base) if not panel else m.base),
        "n_exog": getattr(m, "n_exog_", 0),
        "test": comparison_test(inp, best),
        "cover": bt.coverage() if hasattr(bt, "coverage") else {},
        "n_test": int(np.asarray(bt.actual).size),
        "rows": len(bt.actual),
        "cases": attention_cases(att[keep]) if keep.any() else None,
        "case_rows": np.flatnonzero(keep),
    }
    bands = getattr(bt, "intervals", None) or {}
    # a level whose every bound is infinite says nothing by its coverage (100%)
    c["unbounded"] = [q for q, (lo, hi) in sorted(bands.items())
                      if not (np.isfinite(lo) & np.isfinite(hi)).any()]
    c["cover_off"] = coverage_off({q: v for q, v in c["cover"].items()
                                   if q not in c["unbounded"]}, c["n_test"])
    if panel:
        c.update(S=len(m.series_), short=int((~m.in_network_).sum()),
                 n_cal=int(m.n_calibration_), holdout=float(m.holdout),
                 held=int(round(m.holdout * int(m.in_network_.sum()))),
                 cal_series=int(round(m.holdout * int(m.in_network_.sum()))) // 2,
                 widths={float(q): np.asarray(v, dtype=float)
                         for q, v in m.interval_widths_.items()})
    if inp.ablation is not None:
        c["verdict"], c["verdict_p"] = pooling_verdict(inp.ablation)
    return c
