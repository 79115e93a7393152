"""Figures of attention health: the experiments of docs/diagnostics.md and a monitor's record."""

from __future__ import annotations

import math

from matplotlib.ticker import NullFormatter

from attnlab.plots._figure import figure


def _fig(axes):
    """The figure of a panel or of the first of several."""
    first = axes[0] if hasattr(axes, "__len__") else axes
    return first.figure


def _titled(axes, title: str):
    """Each panel's legend and the figure's title; returns the panels."""
    for ax in axes:
        ax.legend(fontsize=8)
    _fig(axes).suptitle(title, fontsize=10)
    return axes


BLUE, ORANGE, GREEN, RED, GREY = "#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8C8C8C"


def draw_why_sqrt_d(sweep: dict, curves: dict | None, axes):
    """The slide: without 1/sqrt(d_k) the scores' spread grows as sqrt(d_k), the softmax
    saturates and passes less gradient, and a model learns later. Drawn into ``axes`` (one per
    panel); returns them."""
    d = sweep["d_k"]
    ax = axes[0]
    ax.plot(d, sweep["std_unscaled"], "o-", color=RED, label="q·k (no scale)")
    ax.plot(d, sweep["std_scaled"], "o-", color=BLUE, label="q·k / √d_k")
    ax.plot(d, [math.sqrt(x) for x in d], ":", color=GREY, label="√d_k")
    ax.set(xscale="log", yscale="log", xlabel="head dim d_k", ylabel="std of the scores",
           title="score spread")
    ax.minorticks_off()
    ax.set_xticks(d, [str(x) for x in d], fontsize=7)
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.plot(d, [100 * x for x in sweep["saturation_unscaled"]], "o-", color=RED,
            label="no scale")
    ax.plot(d, [100 * x for x in sweep["saturation_scaled"]], "o-", color=BLUE,
            label="1/√d_k")
    ax.set(xscale="log", xlabel="head dim d_k", ylabel="rows with a weight > 0.99 (%)",
           title="softmax saturation", ylim=(-3, 100))
    ax.minorticks_off()
    ax.set_xticks(d, [str(x) for x in d], fontsize=7)
    ax.legend(fontsize=8)
    ax = axes[2]
    ax.plot(d, sweep["jacobian_unscaled"], "o-", color=RED, label="no scale")
    ax.plot(d, sweep["jacobian_scaled"], "o-", color=BLUE, label="1/√d_k")
    ax.set(xscale="log", xlabel="head dim d_k", ylabel="‖∂softmax/∂s‖_F (row mean)",
           title="gradient through the softmax", ylim=(0, None))
    ax.minorticks_off()
    ax.set_xticks(d, [str(x) for x in d], fontsize=7)
    ax.legend(fontsize=8)
    if curves:
        ax = axes[3]
        for key, color, label in (("unscaled", RED, "no scale"), ("scaled", BLUE, "1/√d_k")):
            ax.plot(curves[key]["loss"], color=color, label=label, lw=1.2)
        ax.set(xlabel="training step", ylabel="loss (log scale)", yscale="log",
               title=f"training, d_k = {curves['d_k']}")
        ax.legend(fontsize=8)
    _fig(axes).suptitle("Why attention divides by √d_k (unit-variance q and k, 128 keys)",
                 fontsize=11)
    return axes


def save_why_sqrt_d(sweep: dict, curves: dict | None, paths) -> None:
    """:func:`draw_why_sqrt_d` written to ``paths`` (one or several formats)."""
    panels = 4 if curves else 3
    with figure(paths, figsize=(4.0 * panels, 3.8)) as fig:
        draw_why_sqrt_d(sweep, curves, fig.subplots(1, panels))


def draw_temperature(result: dict, axes):
    """Entropy and saturation against the temperature T, per d_k. Drawn into ``axes`` (one per
    panel); returns them."""
    rows = result["rows"]
    dims = sorted({r["d_k"] for r in rows})
    colors = [BLUE, ORANGE, GREEN, RED]
    a, b = axes
    for d, c in zip(dims, colors):
        sel = [r for r in rows if r["d_k"] == d]
        ts = [r["T"] for r in sel]
        a.plot(ts, [r["entropy_ratio"] for r in sel], "o-", color=c, label=f"d_k = {d}")
        b.plot(ts, [100 * r["saturation"] for r in sel], "o-", color=c, label=f"d_k = {d}")
    a.set(xscale="log", xlabel="temperature T", ylabel="entropy / ln n",
          title="T > 1 softens the softmax", ylim=(0, 1.02))
    b.set(xscale="log", xlabel="temperature T", ylabel="rows with a weight > 0.99 (%)",
          title="and undoes saturation")
    for ax in (a, b):
        ax.minorticks_off()
        ax.set_xticks([0.5, 1, 2, 4], ["0.5", "1", "2", "4"])
    return _titled(axes, "Temperature on q, k of std 2 (a model whose projections have grown)")


def save_temperature(result: dict, paths) -> None:
    """:func:`draw_temperature` written to ``paths`` (one or several formats)."""
    with figure(paths, figsize=(9.0, 3.6)) as fig:
        draw_temperature(result, fig.subplots(1, 2))


def draw_logit_growth(result: dict, axes):
    """The largest attention logit and the final loss against the learning rate, with and
    without QK-norm. Drawn into ``axes`` (one per panel); returns them."""
    rows = result["rows"]
    a, b = axes
    for qk, color, label in (("none", RED, "no QK-norm"), ("layernorm", BLUE, "QK-norm")):
        sel = [r for r in rows if r["qk_norm"] == qk]
        lrs = [r["lr"] for r in sel]
        a.plot(lrs, [r["max_logit"] for r in sel], "o-", color=color, label=label)
        b.plot(lrs, [r["final_loss"] for r in sel], "o-", color=color, label=label)
    a.set(xscale="log", yscale="log", xlabel="learning rate",
          ylabel="largest attention logit", title="attention-logit growth")
    b.set(xscale="log", xlabel="learning rate", ylabel="final loss (last 20 steps)",
          title="final loss")
    return _titled(axes, "Learning-rate sweep with and without QK-norm (after Wortsman et al. "
                         "2023)")


def save_logit_growth(result: dict, paths) -> None:
    """:func:`draw_logit_growth` written to ``paths`` (one or several formats)."""
    with figure(paths, figsize=(9.0, 3.6)) as fig:
        draw_logit_growth(result, fig.subplots(1, 2))


def draw_ln_depth(result: dict, axes):
    """Gradient norm of each layer's feed-forward W2 at initialisation, post-LN beside pre-LN,
    and the last layer's against depth. Drawn into ``axes`` (three panels); returns them."""
    colors = [BLUE, ORANGE, GREEN, RED]
    depths = result["depths"]

    def norms(tag, depth):
        return result[tag][depth] if depth in result[tag] else result[tag][str(depth)]
    for ax, tag, title in ((axes[0], "post", "post-LN"), (axes[1], "pre", "pre-LN")):
        for depth, c in zip(depths, colors):
            v = norms(tag, depth)
            ax.plot(range(1, len(v) + 1), v, "o-", ms=3, color=c, label=f"{depth} layers")
        ax.set(xlabel="layer (1 = input side)", title=title, ylim=(0, None))
        ax.legend(fontsize=8)
    axes[1].sharey(axes[0])
    axes[0].set_ylabel("‖∂loss/∂W2‖ (mean of seeds)")
    ax = axes[2]
    for tag, color, label in (("post", RED, "post-LN"), ("pre", BLUE, "pre-LN")):
        ax.plot(depths, [norms(tag, d)[-1] for d in depths], "o-", color=color, label=label)
    first = norms("pre", depths[0])[-1]
    ax.plot(depths, [first * math.sqrt(depths[0] / d) for d in depths], ":", color=GREY,
            label="∝ 1/√L")
    ax.set(xscale="log", xlabel="depth L", title="last layer's W2 gradient", ylim=(0, None))
    ax.minorticks_off()
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.legend(fontsize=8)
    _fig(axes).suptitle(f"Feed-forward gradients at initialisation ({len(result['seeds'])} "
                        "seeds; Xiong et al. 2020, Theorem 1)", fontsize=10)
    return axes


def save_ln_depth(result: dict, paths) -> None:
    """:func:`draw_ln_depth` written to ``paths`` (one or several formats)."""
    with figure(paths, figsize=(12.0, 3.6)) as fig:
        draw_ln_depth(result, fig.subplots(1, 3))


def draw_ln_training(result: dict, axes):
    """Loss curves of post-LN (each warm-up) and pre-LN at depth, one thin line per seed, one
    panel per configuration. Drawn into ``axes``; returns them."""
    configs = []
    for r in result["rows"]:
        if (r["norm"], r["warmup"]) not in configs:
            configs.append((r["norm"], r["warmup"]))
    for ax, (norm, warm) in zip(axes, configs):
        rows = [r for r in result["rows"] if (r["norm"], r["warmup"]) == (norm, warm)]
        color = BLUE if norm == "pre" else RED
        for r in rows:
            ax.plot(r["loss"], color=color, lw=0.9, alpha=0.8)
        trained = sum(r["trained"] for r in rows)
        ax.axhline(math.log(16), color=GREY, ls=":", lw=1)
        ax.set(yscale="log", xlabel="step", title=f"{norm}-LN, warm-up {warm}: "
               f"{trained}/{len(rows)} trained")
    axes[0].set_ylabel("loss (log; dotted: chance)")
    _fig(axes).suptitle(f"{result['depth']} layers, Adam lr {result['lr']:g}, one line per "
                        "seed", fontsize=10)
    return axes


def save_ln_training(result: dict, paths) -> None:
    """:func:`draw_ln_training` written to ``paths`` (one or several formats)."""
    n = len({(r["norm"], r["warmup"]) for r in result["rows"]})
    with figure(paths, figsize=(3.2 * n, 3.2)) as fig:
        draw_ln_training(result, fig.subplots(1, n, sharey=True))


def draw_monitor(monitor, axes):
    """A monitor's statistics over training, one line per attention layer. Drawn into ``axes``
    (one per panel); returns them."""
    keys = [("score_max", "largest logit"), ("entropy_ratio", "entropy / ln n"),
            ("saturation", "saturated rows"), ("grad_norm", "gradient norm")]
    for ax, (key, title) in zip(axes, keys):
        for layer, points in monitor.series(key).items():
            steps, values = zip(*points) if points else ((), ())
            ax.plot(steps, values, lw=1.2, label=layer)
        ax.set(xlabel="step", title=title)
        if key == "score_max":                 # logits may be negative: symmetric log
            ax.set_yscale("symlog", linthresh=1.0)
        elif key == "grad_norm":
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0].legend(fontsize=7)
    for alarm in monitor.alarms[:1]:
        _fig(axes).suptitle(f"first alarm: {alarm.name} at step {alarm.step} in {alarm.layer}",
                     fontsize=10, color=RED)
    return axes


def save_monitor(monitor, paths) -> None:
    """:func:`draw_monitor` written to ``paths`` (one or several formats)."""
    with figure(paths, figsize=(12.0, 3.2)) as fig:
        draw_monitor(monitor, fig.subplots(1, 4))


