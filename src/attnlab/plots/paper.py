"""The paper's figures: vector PDFs drawn at the width they are printed, with text at the size
of the body's small print (9-10 pt against the body's 11 pt), in the paper's language.

Each figure's size is the size it takes on the page (``\\linewidth`` of A4 with 2.5 cm margins:
16 cm), so nothing is scaled down by LaTeX. The words come from the language's template (the
``plot.*`` pieces of :mod:`attnlab.models.forecast.paper.text`). For Chinese, text is set in a
CJK font found through fontconfig (:func:`cjk_font_file`), after DejaVu Sans in each text
element's family list, so that Latin letters and digits keep a proportional face and only the
characters DejaVu lacks come from the CJK font (the font file is added to matplotlib's font
list, which changes no other entry); without one, the figures fall back to the English words
and say so in a warning.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from attnlab.plots._figure import figure

WIDTH = 16 / 2.54                 # \linewidth in inches (A4, 2.5 cm margins)
SIZE = 9.5                        # text size in points, printed at 100%
COLORS = {"attention": "#d62728", "observed": "black", "other": "#1f77b4"}
# families with simplified Chinese glyphs, in order of preference (fontconfig names)
CJK_FAMILIES = ("Noto Sans CJK SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
                "WenQuanYi Micro Hei", "AR PL SungtiL GB", "AR PL UMing CN", "AR PL KaitiM GB",
                "Noto Serif CJK SC", "FandolSong")


@lru_cache(maxsize=1)
def cjk_font_file() -> str | None:
    """A TrueType/OpenType file with simplified Chinese glyphs (fontconfig's ``fc-list
    :lang=zh-cn``), preferring :data:`CJK_FAMILIES`; None when none is installed."""
    if shutil.which("fc-list") is None:
        return None
    try:
        out = subprocess.run(["fc-list", ":lang=zh-cn", "file", "family"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = {}
    for line in out.splitlines():
        file, _, fams = line.partition(":")
        for fam in fams.strip().split(","):
            found.setdefault(fam.strip(), file.strip())
    usable = {k: v for k, v in found.items() if v.lower().endswith((".ttf", ".otf", ".ttc"))}
    for fam in CJK_FAMILIES:
        if fam in usable:
            return usable[fam]
    return next(iter(usable.values()), None)


@lru_cache(maxsize=None)
def _cjk_family(path: str) -> str:
    """The family name of the font file ``path``, added to matplotlib's font list once (an
    addition: no other font's entry or any setting changes) so that a family list can fall
    back to it glyph by glyph."""
    from matplotlib import font_manager

    if not any(f.fname == path for f in font_manager.fontManager.ttflist):
        font_manager.fontManager.addfont(path)
    return font_manager.FontProperties(fname=path).get_name()


class Words:
    """The figures' words in one language, and the font they are set in."""

    def __init__(self, lang: str):
        from matplotlib.font_manager import FontProperties

        from attnlab.models.forecast.paper.text import fill

        self.lang, self.fill = lang, fill
        font = cjk_font_file() if lang != "en" else None
        if lang != "en" and font is None:
            warnings.warn("no font with Chinese glyphs is installed: the paper's figures carry "
                          "English words (Debian: apt-get install fonts-noto-cjk)", UserWarning,
                          stacklevel=3)
            self.lang = "en"
        self.font = font

        family = ["DejaVu Sans"] + ([_cjk_family(font)] if font else [])

        def props(size: float = SIZE):
            # Latin letters and digits in DejaVu Sans, the characters it lacks in the CJK face
            # (a CJK font's own Latin is often monospaced): matplotlib's per-glyph fallback
            return FontProperties(family=family, size=size)
        self.props = props

    def __call__(self, name: str, **kw) -> str:
        return self.fill(self.lang, name, **kw).replace("\\n", "\n")

    def method(self, name: str) -> str:
        """A method's name (``ets``, ``attention``, ...) in the figures' language."""
        from attnlab.models.forecast.paper.text import word

        return word(self.lang, "method", name)

    def base(self, name: str) -> str:
        """A base's name in the figures' language."""
        from attnlab.models.forecast.paper.text import word

        return word(self.lang, "base", name).replace("--", "-")   # CJK fonts lack the en dash


def _cjk(text: str) -> bool:
    return any(ord(ch) >= 0x2E80 for ch in text)


def _wrap(text: str, width: int = 28) -> str:
    """``text`` on lines of at most ``width`` characters, broken after spaces or underscores
    (identifiers such as ``professional_and_business_services``) where it can be."""
    lines = [""]
    for part in re.split(r"(?<=[_ ])", text):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(ln.rstrip() for ln in lines)


def _style(ax, w: Words) -> None:
    """Tick labels at the figure's size: numbers in DejaVu Sans (a CJK font may lack the
    minus sign), labels with CJK characters in the CJK font."""
    from matplotlib.font_manager import FontProperties

    for lab in ax.get_xticklabels() + ax.get_yticklabels():
        lab.set_fontproperties(w.props(SIZE - 1) if _cjk(lab.get_text())
                               else FontProperties(family="DejaVu Sans", size=SIZE - 1))
    ax.spines[["top", "right"]].set_visible(False)


def draw_architecture(model, ax, lang: str = "en", panel: bool = False):
    """The fitted forecaster's blocks with their real sizes, into ``ax`` (the whole figure:
    its coordinates run 0..1); ``panel``: the global model's inputs."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    w = Words(lang)
    L, H, d = model.effective_lookback, model.horizon, model.hidden_size
    n_in = 1 if panel else getattr(model, "n_features_", 2)
    n_head = 2 * d + (H if panel else getattr(model, "n_future_", 0) * H)
    pool = w("plot.arch.mean") if model.pool == "mean" else w("plot.arch.attention", L=L)
    base = getattr(model, "base_name_", model.base)
    values = w("plot.arch.values1") if n_in == 1 else w("plot.arch.values", n=n_in)
    boxes = [w("plot.arch.input", L=L, n=values),
             w("plot.arch.encoder", ENC=model.encoder.upper(), L=L, d=d), pool,
             w("plot.arch.head", n_head=n_head, d=d, H=H), w("plot.arch.out", H=H)]
    colors = ["#dbe9f6", "#c6dbef", "#fdd0a2", "#c7e9c0", "#e5e5e5"]
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    # five boxes with room around their three lines of text, arrows in the gaps between
    xs = [0.01 + 0.2 * i for i in range(5)]
    bw = 0.17
    for x, text, color in zip(xs, boxes, colors):
        ax.add_patch(FancyBboxPatch((x, 0.42), bw, 0.54, boxstyle="round,pad=0.01",
                                    facecolor=color, edgecolor="#555555"))
        ax.text(x + bw / 2, 0.69, text, ha="center", va="center",
                fontproperties=w.props(SIZE - 1.5), linespacing=1.35)
    for x, nx in zip(xs, xs[1:]):
        ax.add_patch(FancyArrowPatch((x + bw + 0.008, 0.69), (nx - 0.008, 0.69),
                                     arrowstyle="-|>", mutation_scale=10, color="#333333"))
    label = w("plot.arch.base_panel" if panel else "plot.arch.base", bname=w.base(base))
    ax.add_patch(FancyBboxPatch((0.26, 0.04), 0.52, 0.22, boxstyle="round,pad=0.01",
                                facecolor="#f2f2f2", edgecolor="#555555"))
    ax.text(0.52, 0.15, label, ha="center", va="center", fontproperties=w.props(SIZE - 1.5))
    ax.add_patch(FancyArrowPatch((0.79, 0.15), (xs[4] + bw / 2, 0.40), arrowstyle="-|>",
                                 mutation_scale=10, color="#333333"))
    return ax


def save_architecture(model, path, lang: str = "en", panel: bool = False) -> Path:
    """:func:`draw_architecture` as a PDF (or any format by suffix) ``WIDTH`` wide."""
    with figure(path, figsize=(WIDTH, 2.3), layout=None) as fig:
        draw_architecture(model, fig.add_axes((0, 0, 1, 1)), lang, panel)
    return Path(path)


def draw_attention(att: np.ndarray, rows: list[str], ax, lang: str = "en",
                   panel: bool = False):
    """Rows (origins or series) by lags: the weight times L, diverging at 1 (uniform), into
    ``ax`` with its colour bar beside it."""
    from matplotlib.colors import TwoSlopeNorm

    w = Words(lang)
    att = np.asarray(att, dtype=float)
    n, L = att.shape
    rel = att * L
    norm = TwoSlopeNorm(vmin=0.0, vcenter=1.0, vmax=max(2.0, float(np.nanmax(rel))))
    fig = ax.figure
    im = ax.imshow(np.ma.masked_invalid(rel), cmap="RdBu_r", norm=norm, aspect="auto",
                   interpolation="nearest")
    step = max(1, int(np.ceil(L / 8)))          # at most 9 labels, the last lag always
    ticks = [j for j in range(L) if (L - j) % step == 0 or j == L - 1]
    ax.set_xticks(ticks, [f"t−{L - j}" for j in ticks])
    if n <= 40:
        ax.set_yticks(range(n), rows)
    ax.set_xlabel(w("plot.att.x"), fontproperties=w.props())
    ax.set_ylabel(w("plot.att.y.panel" if panel else "plot.att.y.series"),
                  fontproperties=w.props())
    _style(ax, w)
    bar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    top = norm.vmax
    step = 0.5 if top <= 3 else float(np.ceil(top / 6))
    bar.set_ticks(sorted({0.0, 1.0, *np.arange(0.0, top + 1e-9, step).round(2).tolist()}))
    bar.set_label(w("plot.att.bar"), fontproperties=w.props())
    _style(bar.ax, w)
    return ax


def save_attention(att: np.ndarray, rows: list[str], path, lang: str = "en",
                   panel: bool = False) -> Path:
    """:func:`draw_attention` at 0.9 of ``WIDTH``, a row's height per row."""
    n = np.asarray(att).shape[0]
    with figure(path, figsize=(0.9 * WIDTH, min(8.5, 1.5 + 0.19 * n))) as fig:
        draw_attention(att, rows, fig.add_subplot(), lang, panel)
    return Path(path)


def draw_backtest(y, bt, ax, lang: str = "en"):
    """One series' rolling-origin backtest into ``ax``: the observed tail, every origin's
    forecasts from the model and the best other method, and the model's 80% and 95%
    intervals."""
    w = Words(lang)
    yv = np.asarray(y, dtype=float)
    index = getattr(y, "index", None)
    import pandas as pd

    x = index if isinstance(index, pd.DatetimeIndex) else np.arange(len(yv))
    H = bt.actual.shape[1]
    start = max(0, int(bt.origins[0]) - 3 * H)
    best = min((k for k in bt.forecasts if k != "attention"),
               key=lambda k: bt.metrics[k]["MASE"], default=None)
    ax.plot(x[start:], yv[start:], color="black", linewidth=1.0, label=w("plot.observed"))
    for q in sorted(bt.intervals or {}, reverse=True):
        lo, hi = bt.intervals[q]
        bounded = bool((np.isfinite(lo) & np.isfinite(hi)).any())
        for k, t in enumerate(bt.origins):
            ok = np.isfinite(lo[k]) & np.isfinite(hi[k])
            ax.fill_between(np.asarray(x[t:t + H])[ok], lo[k][ok], hi[k][ok],
                            color=COLORS["attention"], alpha=0.10 if q > 0.9 else 0.22,
                            linewidth=0, label=(w("plot.interval", level=f"{q:.0%}")
                                                + ("" if bounded else w("plot.unbounded")))
                            if k == 0 else None)
    for name in ["attention"] + ([best] if best else []):
        for k, t in enumerate(bt.origins):
            ax.plot(x[t:t + H], bt.forecasts[name][k], linewidth=1.1,
                    color=COLORS["attention" if name == "attention" else "other"],
                    linestyle="-" if name == "attention" else "--",
                    label=w("plot.mase", method=w.method(name),
                            v=f"{bt.metrics[name]['MASE']:.2f}") if k == 0 else None)
    ax.axvline(x[int(bt.origins[0])], color="#999999", linewidth=0.8)
    ax.set_xlabel(w("plot.bt.x.date" if isinstance(index, pd.DatetimeIndex)
                    else "plot.bt.x.step"), fontproperties=w.props())
    ax.set_ylabel(w("plot.bt.y", series=getattr(y, "name", None) or w("plot.observed")),
                  fontproperties=w.props())
    ax.legend(loc="upper left", prop=w.props(SIZE - 1), frameon=False, ncol=2)
    _style(ax, w)
    return ax


def save_backtest(y, bt, path, lang: str = "en") -> Path:
    """:func:`draw_backtest` ``WIDTH`` wide."""
    with figure(path, figsize=(WIDTH, 3.2)) as fig:
        draw_backtest(y, bt, fig.add_subplot(), lang)
    return Path(path)


def panel_rows(result, k: int = 6) -> list[int]:
    """``k`` series spread over the ranks of the model's MASE (best, worst and between), so
    that the figure shows the range rather than a chosen few."""
    order = np.argsort(result.per_series["attention"])
    pick = np.unique(np.round(np.linspace(0, len(order) - 1, min(k, len(order)))).astype(int))
    return [int(order[i]) for i in pick]


def draw_panel(result, train: list, axes, lang: str = "en", k: int = 6) -> int:
    """``k`` series of a held-out panel (:func:`panel_rows`), one per axes of ``axes`` (at
    least ``k``; the rest are hidden): the end of the training part, the held-out values, the
    model's forecast with its 80% interval, and the best baseline's forecast; one legend below
    them. Returns the number of series drawn."""
    from matplotlib.font_manager import FontProperties

    w = Words(lang)
    rows = panel_rows(result, k)
    H = result.actual.shape[1]
    best = min((m for m in result.metrics if m != "attention"),
               key=lambda m: result.metrics[m]["MASE"])
    axes = np.atleast_1d(axes).ravel()
    fig = axes[0].figure
    for ax, i in zip(axes, rows):
        x = np.asarray(train[i], dtype=float)[-3 * H:]
        t_hist = np.arange(-len(x), 0)
        t_fut = np.arange(H)
        ax.plot(t_hist, x, color="black", linewidth=0.9, label=w("plot.observed"))
        ax.plot(t_fut, result.actual[i], color="black", linewidth=0.9)
        lo, hi = (result.intervals or {}).get(0.8, (None, None))
        if lo is not None and np.isfinite(lo[i]).all() and np.isfinite(hi[i]).all():
            ax.fill_between(t_fut, lo[i], hi[i], color=COLORS["attention"], alpha=0.2,
                            linewidth=0, label=w("plot.interval", level="80%"))
        ax.plot(t_fut, result.forecasts["attention"][i], color=COLORS["attention"],
                linewidth=1.1, label=w.method("attention"))
        ax.plot(t_fut, result.forecasts[best][i], color=COLORS["other"], linestyle="--",
                linewidth=1.0, label=w.method(best))
        ax.axvline(-0.5, color="#999999", linewidth=0.7)
        name = _wrap(str(result.ids[i]))                   # wrapped, never cut
        ax.set_title(f"{name}\nMASE {result.per_series['attention'][i]:.2f}",
                     fontproperties=w.props(SIZE - 1) if _cjk(name) else
                     FontProperties(family="DejaVu Sans", size=SIZE - 1))
        _style(ax, w)
    for ax in axes[len(rows):]:
        ax.axis("off")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False,
               prop=w.props(SIZE - 1))
    return len(rows)


def save_panel(result, train: list, path, lang: str = "en", k: int = 6) -> tuple[Path, int]:
    """:func:`draw_panel` ``WIDTH`` wide, three series a row; returns the path and the number
    of series drawn."""
    nrow = int(np.ceil(min(k, len(result.ids)) / 3))
    with figure(path, figsize=(WIDTH, 2.2 * nrow + 0.5), layout=None) as fig:
        shown = draw_panel(result, train, fig.subplots(nrow, 3), lang, k)
        fig.tight_layout(rect=(0, 0.07, 1, 1))
    return Path(path), shown
