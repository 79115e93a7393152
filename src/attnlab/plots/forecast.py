"""Figures of a forecaster: the backtest, attention per origin, the forecast and its window."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.plots._figure import figure
from attnlab.plots.heatmap import draw_heatmap, save_heatmap

COLORS = {"attention": "#d62728", "seasonal_naive": "#7f7f7f", "naive": "#bcbd22",
          "ets": "#2ca02c", "ar": "#1f77b4"}


def time_label(index, i: int) -> str:
    """The label of step ``i``: its date (``YYYY-MM-DD``) with a date index, else the step."""
    if index is None:
        return str(int(i))
    v = index[int(i)]
    return v.strftime("%Y-%m-%d") if hasattr(v, "strftime") else str(v)


def _x(index, n: int):
    import pandas as pd

    return index if isinstance(index, pd.DatetimeIndex) else np.arange(n)


def draw_backtest(y, bt, ax, name: str):
    """The series' test part with every origin's forecasts from the forecaster and the two
    best other methods, and the forecaster's conformal intervals when the backtest has them,
    into ``ax``."""
    yv = np.asarray(y, dtype=float)
    x = _x(getattr(y, "index", None), len(yv))
    H = bt.actual.shape[1]
    start = max(0, int(bt.origins[0]) - 3 * H)
    ax.plot(x[start:], yv[start:], color="black", linewidth=1.2, label="observed")
    for q in sorted(getattr(bt, "intervals", None) or {}, reverse=True):
        lo, hi = bt.intervals[q]
        unbounded = not (np.isfinite(lo) & np.isfinite(hi)).any()
        for k, t in enumerate(bt.origins):
            ok = np.isfinite(lo[k]) & np.isfinite(hi[k])
            ax.fill_between(np.asarray(x[t:t + H])[ok], lo[k][ok], hi[k][ok],
                            color=COLORS.get("attention", "#d62728"),
                            alpha=0.10 if q > 0.9 else 0.2, linewidth=0,
                            label=(f"{q:.0%} conformal interval" + (
                                " (unbounded: too few held-out windows)" if unbounded else ""))
                            if k == 0 else None)
    others = sorted((k for k in bt.forecasts if k != "attention"),
                    key=lambda k: bt.metrics[k]["MASE"])[:2]      # the two best, legibly
    for name_m in [k for k in bt.forecasts if k == "attention" or k in others]:
        fc = bt.forecasts[name_m]
        for k, t in enumerate(bt.origins):
            ax.plot(x[t:t + H], fc[k], color=COLORS.get(name_m, None), linewidth=1.1,
                    alpha=0.9, label=f"{name_m} (MASE {bt.metrics[name_m]['MASE']:.2f})"
                    if k == 0 else None, linestyle="-" if name_m == "attention" else "--")
    ax.axvline(x[int(bt.origins[0])], color="#999999", linewidth=0.8)
    ax.set_title(f"{name}: rolling-origin backtest, {len(bt.origins)} origins, horizon {H}")
    ax.set_ylabel(name)
    ax.legend(loc="upper left", fontsize=8)
    return ax


def save_backtest(y, bt, path, name: str) -> Path:
    """:func:`draw_backtest` written to ``path``."""
    with figure(path, figsize=(10, 4)) as fig:
        draw_backtest(y, bt, fig.add_subplot(), name)
    return Path(path)


def draw_forecast_attention(bt, ax, index, name: str):
    """Heatmap into ``ax``: one row per forecast origin, one column per past step (lag), the
    weight times L on a diverging scale centred at 1 (the uniform 1/L), so that weights near
    uniform read as white however small their spread."""
    L = bt.attention.shape[1]
    cols = [f"t-{L - j}" if (L - j) % max(1, L // 12) == 0 or j == L - 1 else ""
            for j in range(L)]
    rows = [time_label(index, t) for t in bt.origins]
    from matplotlib.colors import TwoSlopeNorm

    rel = np.asarray(bt.attention, dtype=float) * L             # 1 = the uniform weight 1/L
    # diverging at 1: blue below uniform (down to 0), red above, at least up to 2, so that
    # weights within a few percent of uniform stay white instead of filling the scale
    finite = rel[np.isfinite(rel)]
    norm = TwoSlopeNorm(vmin=0.0, vcenter=1.0,
                        vmax=max(2.0, float(finite.max())) if finite.size else 2.0)
    title = (f"{name}: attention over the past {L} steps against uniform, per forecast origin"
             if finite.size else
             f"{name}: no attention to show: at every origin the forecast is the statistical "
             "base's alone\n(the series is too short for the network, or its correction was "
             "switched off: w = 0)")
    return draw_heatmap(rel, ax, title=title, row_labels=rows, col_labels=cols,
                        xlabel="past time step (lag before the origin)",
                        ylabel="forecast origin", cmap="RdBu_r", norm=norm,
                        colorbar_label="α · L (1 = uniform 1/L)", annotate=False)


def save_forecast_attention(bt, path, index, name: str) -> Path:
    """:func:`draw_forecast_attention` written to ``path``."""
    L, n = bt.attention.shape[1], len(bt.origins)
    return save_heatmap(bt.attention, path, figsize=(min(12.0, 0.22 * L + 3.5), 0.35 * n + 2.2),
                        draw=lambda m, ax: draw_forecast_attention(bt, ax, index, name))


def draw_future(y, future, weights, lookback: int, axes, name: str, *, dates=None, bt=None,
                intervals=None):
    """Into ``axes = (ax, axw)``: the end of the series, the forecast with its conformal 80%
    and 95% intervals (``intervals``: ``{level: (lower, upper)}``; without them, an 80% band
    from the backtest's errors when ``bt`` is given), and (``axw``) the attention over the
    window it read beside the uniform 1/L (``weights`` None: the forecast is the base's
    alone, and ``axw`` says so). With a date index and ``dates`` (the forecast steps' dates)
    the x axis shows dates."""
    import pandas as pd

    yv = np.asarray(y, dtype=float)
    n, H = len(yv), len(future)
    if weights is not None and not np.isfinite(np.asarray(weights, dtype=float)).all():
        weights = None
    lookback = min(lookback, n)
    index = getattr(y, "index", None)
    dated = isinstance(index, pd.DatetimeIndex) and dates is not None and len(dates) == H
    start = max(0, n - 2 * lookback)
    if dated:
        past_x = index[start:]
        fut_x = pd.DatetimeIndex(pd.to_datetime(dates))
        win_x = index[n - lookback:]
    else:
        past_x, fut_x, win_x = range(start - n, 0), np.arange(H), np.arange(-lookback, 0)
    ax, axw = axes
    ax.plot(past_x, yv[start:], color="black", label="observed")
    ax.plot(fut_x, future, color="#d62728", marker="o", markersize=3,
            label=f"forecast ({H} steps)")
    if intervals:
        for level in sorted(intervals, reverse=True):
            lo, hi = (np.asarray(v, dtype=float) for v in intervals[level])
            ok = np.isfinite(lo) & np.isfinite(hi)
            label = f"{level:.0%} conformal interval"
            if not ok.all():          # said, not drawn: a band cannot show an unbounded one
                label += (" (unbounded: too few held-out windows)" if not ok.any()
                          else f" (unbounded after step {int(ok.sum())})")
            ax.fill_between(np.asarray(fut_x)[ok] if not dated else fut_x[ok], lo[ok], hi[ok],
                            color="#d62728", alpha=0.12 if level > 0.9 else 0.22,
                            label=label)
    elif bt is not None and "attention" in bt.forecasts and len(bt.origins) >= 2:
        err = np.asarray(bt.actual, dtype=float) - np.asarray(bt.forecasts["attention"])
        steps = min(H, err.shape[1])
        rms = np.sqrt(np.mean(err[:, :steps] ** 2, axis=0))              # per step
        rms = np.concatenate([rms, np.full(H - steps, rms[-1])])
        f = np.asarray(future, dtype=float)
        ax.fill_between(fut_x, f - 1.2816 * rms, f + 1.2816 * rms, color="#d62728",
                        alpha=0.15, label=f"80% band (normal, from the {len(bt.origins)} "
                        "backtest origins' errors)")
    if weights is None:
        ax.set_title(f"{name}: forecast (the base's alone)")
        ax.legend(loc="upper left", fontsize=8)
        axw.axis("off")
        axw.text(0.5, 0.5, "no attention: the forecast is the statistical base's alone "
                 "(no network in use)", ha="center", va="center", transform=axw.transAxes,
                 fontsize=9, color="#444444")
        return axes
    ax.axvspan(win_x[0], win_x[-1], color="#2f6db3", alpha=0.08, label="window read")
    ax.set_title(f"{name}: forecast and the attention over the window it read")
    ax.legend(loc="upper left", fontsize=8)
    axw.bar(win_x, weights, color="#2f6db3",
            width=(0.9 if not dated else 0.9 * float(np.median(np.diff(
                win_x.values.astype("datetime64[D]").astype(float))))))
    axw.axhline(1.0 / lookback, color="#444444", linewidth=0.9, linestyle="--",
                label=f"uniform 1/L = {1.0 / lookback:.3f}")
    axw.legend(loc="upper left", fontsize=7)
    axw.set_ylabel("attention")
    axw.set_xlabel("date" if dated else "time step relative to the end of the series")
    return axes


def save_future(y, future, weights, lookback: int, path, name: str, *, dates=None,
                bt=None, intervals=None) -> Path:
    """:func:`draw_future` written to ``path``."""
    with figure(path, figsize=(10, 5)) as fig:
        axes = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
        draw_future(y, future, weights, lookback, axes, name, dates=dates, bt=bt,
                    intervals=intervals)
    return Path(path)


def draw_architecture(model, ax):
    """The fitted forecaster's structure as a block diagram into ``ax``, with its real
    dimensions: the input window, the encoder, the attention pooling (query from the last
    state), the output layer, and the base forecast it corrects."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    L, H, d = model.effective_lookback, model.horizon, model.hidden_size
    n_in = getattr(model, "n_features_", 2)
    base = getattr(model, "base_name_", model.base)
    pool = "mean pooling" if model.pool == "mean" else "attention pooling"
    boxes = [
        (0.02, f"input window\n{L} steps x {n_in} features", "#dbe9f6"),
        (0.22, f"{model.encoder.upper()} encoder\n{L} states of size {d}", "#c6dbef"),
        (0.42, f"{pool}\nq = W_q h_L, k_t = W_k h_t\nweights over {L} steps", "#fdd0a2"),
        (0.62, f"output layer\n[c; h_L] ({2 * d}) -> {d} -> {H}", "#c7e9c0"),
        (0.82, f"forecast\nbase + correction\n{H} steps", "#e5e5e5"),
    ]
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    for x, text, color in boxes:
        ax.add_patch(FancyBboxPatch((x, 0.42), 0.16, 0.36, boxstyle="round,pad=0.01",
                                    facecolor=color, edgecolor="#555555"))
        ax.text(x + 0.08, 0.6, text, ha="center", va="center", fontsize=8.5)
    for (x, _, _), (nx, _, _) in zip(boxes, boxes[1:]):
        ax.add_patch(FancyArrowPatch((x + 0.17, 0.6), (nx - 0.01, 0.6),
                                     arrowstyle="-|>", mutation_scale=12, color="#333333"))
    ax.add_patch(FancyBboxPatch((0.62, 0.06), 0.16, 0.2, boxstyle="round,pad=0.01",
                                facecolor="#f2f2f2", edgecolor="#555555"))
    ax.text(0.70, 0.16, f"base forecast: {base}", ha="center", va="center", fontsize=8.5)
    ax.add_patch(FancyArrowPatch((0.79, 0.16), (0.88, 0.41), arrowstyle="-|>",
                                 mutation_scale=12, color="#333333"))
    return ax


def save_architecture(model, path) -> Path:
    """:func:`draw_architecture` written to ``path``."""
    with figure(path, figsize=(11.0, 3.0), layout=None) as fig:
        draw_architecture(model, fig.add_axes((0, 0, 1, 1)))
    return Path(path)


