"""The paper as a LaTeX document: the order of its sections and which pieces of the language's
template (:mod:`~attnlab.models.forecast.paper.text`) each one takes, filled from the numbers of
:func:`~attnlab.models.forecast.paper.context.context`. Nothing here is in one language."""

from __future__ import annotations

import numpy as np

from attnlab.models.forecast.paper.context import PaperInputs, context
from attnlab.models.forecast.paper.text import LANGS, fill, pieces, word
from attnlab.models.latex import escape_tex, text_with_math


def _pct(x: float) -> str:
    return f"{100 * x:.0f}\\%"                    # a bare % would start a TeX comment


def _table(rows, header, caption, cols: str | None = None) -> list[str]:
    cols = cols or "l" + "r" * (len(header) - 1)
    out = [r"\begin{table}[H]", r"\centering", f"\\caption{{{caption}}}",
           f"\\begin{{tabular}}{{{cols}}}", r"\toprule",
           " & ".join(header) + r" \\", r"\midrule"]
    out += [" & ".join(r) + r" \\" for r in rows]
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return out


def _figure(file: str, caption: str, width: str = r"\linewidth") -> list[str]:
    return [r"\begin{figure}[H]", r"\centering", f"\\includegraphics[width={width}]{{{file}}}",
            f"\\caption{{{caption}}}", r"\end{figure}"]


def method_name(lang: str, name: str) -> str:
    """A method's name in ``lang``, escaped (``base alone (ets)`` names its base too)."""
    if name.startswith("base alone (") and name.endswith(")"):
        inner = name[len("base alone ("):-1]
        return f"{word(lang, 'method', 'base alone')} ({escape_tex(word(lang, 'method', inner))})"
    return escape_tex(word(lang, "method", name))


# the prefix of each symbol of the equations' table, and its piece in the templates (the
# English pieces print the equations' own meaning; the others translate it)
_SYMBOLS = (("y_1", "window"), (r"\mu", "mu"), (r"s_\Delta", "sdelta"), ("w", "w"),
            (r"\mathbf{W}_q", "wq"), (r"\mathbf{W}_1", "w1"), (r"\mathbf{b}_q", "bias"),
            (r"\mathbf{X}", "X"), (r"\hat{y}^{\mathrm{base}}", "base"), (r"\mathbf{z}_t", "z"),
            (r"\phi_t", "phi"), (r"\mathbf{P}", "P"), (r"\mathbf{f}", "f"), (r"\mathbf{u}", "u"))


def _meaning(lang: str, sym: str, meaning: str, c: dict, bname: str) -> str:
    key = "s" if sym == "s" else next((k for p, k in _SYMBOLS if sym.startswith(p)), "other")
    w = c["w"]
    fitted = ("" if "shrink" not in c else f"（拟合值 w = {w:.2f}）")
    return fill(lang, f"sym.{key}", meaning=meaning, L=c["L"], bname=bname, m=c["m"],
                n_exog=c["n_exog"], fitted=fitted)


def _symbol_rows(model, lang: str) -> list[tuple[str, str]]:
    """The symbols the text uses beyond the equations' own."""
    L, H = model.effective_lookback, model.horizon
    return [("L", fill(lang, "sym.lookback", L=L)), ("H", fill(lang, "sym.horizon", H=H)),
            ("h", fill(lang, "sym.step")), (r"\mathrm{MASE}", fill(lang, "sym.mase"))]


def _draft(inp: PaperInputs, lang: str) -> str:
    if not inp.draft:
        return ""
    return fill(lang, "draft", why=escape_tex(inp.draft[lang]))


def paper_tex(inp: PaperInputs, lang: str = "en") -> str:
    """The model section of a paper on ``inp`` in ``lang`` (``en``: article, pdflatex;
    ``zh``: ctexart, xelatex)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    c = context(inp)
    m = inp.model
    kind = "panel" if c["panel"] else "series"
    L, H, d, w = c["L"], c["H"], c["d"], c["w"]
    bname = word(lang, "base", c["base"])
    f = lambda name, **kw: fill(lang, name, **kw)           # noqa: E731 - the one idiom here
    doc = [f("preamble", draft=_draft(inp, lang)), f(f"title.{kind}", S=c.get("S", ""))]
    # which model forecasts, first
    if c["panel"]:
        short = f("who.short", n=c["short"], LH=L + H) if c["short"] else ""
        doc.append(f("who.panel_base" if w == 0 else "who.panel", bname=bname, w=f"{w:.2f}",
                     S=c["S"], short=short))
    else:
        who = ("who.series" if w else "who.series_chosen" if not getattr(m, "network", True)
               else "who.series_short" if getattr(m, "base_only_", False)
               else "who.series_base")
        need = max(m.effective_lookback, m.effective_season) + m.horizon + 10
        doc.append(f(who, bname=bname, w=f"{w:.2f}", need=need))
    doc += [f"\\subsection*{{{f('h.motivation')}}}",
            f(f"motivation.{kind}", bname=bname, L=L, S=c.get("S", ""))]
    # assumptions
    season = f("assume.season") if c["m"] > 1 else ""
    if c["panel"]:
        items = [f("assume.panel_regular", m=c["m"]),
                 f("assume.panel_base", bname=bname, season=season, L=L),
                 f("assume.panel_exchangeable"), f("assume.panel_errors", H=H)]
    else:
        items = [f("assume.regular"), f("assume.base", bname=bname, season=season, L=L),
                 f("assume.exog" if c["n_exog"] else "assume.no_exog"), f("assume.errors")]
    doc += [f"\\subsection*{{{f('h.assumptions')}}}", r"\begin{enumerate}"]
    doc += [f"  \\item {x}" for x in items] + [r"\end{enumerate}"]
    # symbols
    eq = m.equations()
    if hasattr(m, "shrink_"):
        c["shrink"] = True
    where = [(s, _meaning(lang, s, mean, c, bname)) for s, mean in eq.where]
    rows = [(f"${s}$", text_with_math(mm)) for s, mm in where + _symbol_rows(m, lang)]
    doc.append(f"\\subsection*{{{f('h.symbols')}}}")
    doc += _table(rows, [f("col.symbol"), f("col.meaning")], f("tab.symbols"),
                  cols=r"lp{0.68\linewidth}")
    # formulation and estimation
    doc.append(f"\\subsection*{{{f('h.formulation')}}}")
    doc.append(f(f"formulation.{kind}", L=L, d=d, H=H,
                 encoder_a=word(lang, "encoder", m.encoder),
                 encoder_A=word(lang, "Encoder", m.encoder), ENC=m.encoder.upper()))
    body = eq.to_latex().split("\n")
    doc += body[body.index(r"\begin{align}"):body.index(r"\end{align}") + 1]
    doc += _estimation(inp, c, lang)
    if "architecture" in inp.figures:
        doc += _figure(inp.figures["architecture"], f("fig.architecture"))
    # the attention in typical cases
    doc.append(f"\\subsection*{{{f('h.cases')}}}")
    if m.pool == "mean":
        doc.append(f("cases.mean_pool"))
    elif w == 0:
        doc.append(f("cases.w_zero"))
    else:
        if "attention" in inp.figures:
            doc += _figure(inp.figures["attention"], f(f"fig.attention.{kind}", L=L),
                           r"0.9\linewidth")
        if c["cases"] is not None:
            doc.append(_cases(inp, c, lang, kind) + (" " if lang == "en" else "")
                       + _reading(inp, c, lang))
    # results
    doc += [f"\\subsection*{{{f('h.results')}}}", f"\\subsubsection*{{{f('h.comparison')}}}"]
    if c.get("unmeasured"):
        hmax = c["n_obs"] - c["need"] + H
        doc.append(f("unmeasured", n=c["n_obs"], H=H, need=c["need"], bname=bname,
                     allow=f("unmeasured.horizon", hmax=hmax) if hmax >= 1
                     else f("unmeasured.longer", need=c["need"] - H + 1)))
        doc += _strengths(inp, c, lang)
        doc.append(f("end"))
        return "\n".join(doc) + "\n"
    doc += _comparison(inp, c, lang, kind)
    doc += _spread(inp, c, lang, kind)
    doc += _ablation(inp, c, lang)
    doc += _sensitivity(inp, lang)
    doc += _strengths(inp, c, lang)
    doc.append(f("end"))
    return "\n".join(doc) + "\n"


def _estimation(inp, c, lang) -> list[str]:
    m = inp.model
    hist = getattr(m, "history_", None)
    epochs, best_epoch = getattr(hist, "epochs", None), getattr(hist, "best_epoch", None)
    common = dict(lr=f"{m.lr:g}", wd=f"{m.weight_decay:g}", batch=m.batch_size,
                  clip=f"{m.clip_norm:g}", patience=m.patience, max_epochs=m.max_epochs,
                  w=f"{c['w']:.2f}")
    out = [f"\\subsection*{{{fill(lang, 'h.estimation')}}}"]
    if c["panel"]:
        out.append(fill(lang, "estimation.panel", S=c["S"], held=c["held"],
                        holdout=_pct(c["holdout"]), ncal=c["n_cal"], calseries=c["cal_series"],
                        epochs=epochs or 0,
                        **common))
        text = fill(lang, "intervals.panel", ncal=c["n_cal"])
        for q, widths in sorted(c["widths"].items()):
            if not np.isfinite(widths).any():
                need = int(np.ceil(q / (1 - q) - 1e-9))
                text += " " + fill(lang, "intervals.unbounded", ncal=c["n_cal"], level=_pct(q),
                                   need=need)
        out.append(text)
        return out
    ran = (fill(lang, "estimation.ran", epochs=epochs, best=best_epoch) if epochs else "")
    out += [fill(lang, "estimation.series", val=_pct(m.val_fraction), ran=ran, **common),
            fill(lang, "estimation.shrink", w=f"{c['w']:.2f}")]
    return out


def _cases(inp, c, lang, kind) -> str:
    cs = c["cases"]
    unit, units = fill(lang, f"unit.{kind}"), fill(lang, f"units.{kind}")
    L = cs["L"]
    if cs["uniform"]:
        return fill(lang, "cases.uniform", unit=unit, lo=f"{cs['lo']:.4f}", hi=f"{cs['hi']:.4f}",
                    uniform=f"{1 / L:.4f}")
    out = [fill(lang, "cases.top", n=cs["n"], units=units, lags=", ".join(map(str, cs["lags"])),
                share=_pct(cs["share"]), even=_pct(3 / L))]
    att = np.asarray(inp.backtest.attention, dtype=float)[c["case_rows"]]
    labels = [inp.origin_labels[i] for i in c["case_rows"]]
    for what, i in cs["typical"].items():
        j = int(np.argmax(att[i]))
        out.append(fill(lang, "cases.one", unit=unit, label=escape_tex(labels[i]),
                        what=fill(lang, f"cases.{what}"), weight=_pct(float(att[i, j])),
                        lag=L - j))
    return (" " if lang == "en" else "").join(out)


def _reading(inp, c, lang) -> str:
    """How far the weights may be read: as evidence of which lags matter only where the
    ablation found attention pooling better than mean pooling; else as a property of the
    fit, said with the numbers that show it."""
    if inp.ablation is None:
        return fill(lang, "cases.unchecked")
    if c["verdict"] == "better":
        return fill(lang, "cases.checked", p=f"{c['verdict_p']:.3f}")
    s = inp.ablation.summary()
    return fill(lang, "cases.fit_property", att=f"{s['base + attention']['mean']:.3f}",
                mean=f"{s['base + mean pooling']['mean']:.3f}")


def _comparison(inp, c, lang, kind) -> list[str]:
    metrics = inp.backtest.metrics
    order = sorted(metrics.items(), key=lambda kv: kv[1]["MASE"])
    if c["panel"]:
        rows = [(method_name(lang, k), f"{v['sMAPE']:.2f}", f"{v['MASE']:.3f}")
                for k, v in order]
        head = [fill(lang, "col.method"), r"sMAPE (\%)", "MASE"]
    else:
        rows = [(method_name(lang, k), f"{v['MAE']:.3f}", f"{v['RMSE']:.3f}", f"{v['MASE']:.3f}")
                for k, v in order]
        head = [fill(lang, "col.method"), "MAE", "RMSE", "MASE"]
    out = _table(rows, head, fill(lang, f"tab.comparison.{kind}", series=escape_tex(inp.series),
                                  k=c["rows"], H=c["H"], S=c.get("S", "")))
    if "backtest" in inp.figures:
        out += _figure(inp.figures["backtest"], fill(
            lang, f"fig.backtest.{kind}", k=inp.shown,
            S=c.get("S", "")))
    cover = c["cover"]
    if cover:
        text = fill(lang, f"coverage.{kind}", c80=_pct(cover.get(0.8, float("nan"))),
                    c95=_pct(cover.get(0.95, float("nan"))))
        if c["unbounded"]:
            text += " " + fill(lang, "coverage.unbounded",
                               levels=fill(lang, "sep.and").join(_pct(q) for q in c["unbounded"]))
        for q, narrow in c["cover_off"]:
            text += fill(lang, "coverage.narrow" if narrow else "coverage.wide", level=_pct(q))
        out.append(text)
    rel = fill(lang, "rel.below" if c["ours"] <= c["theirs"] else "rel.above")
    out.append(fill(lang, f"verdict.{kind}", ours=f"{c['ours']:.3f}", rel=rel,
                    best=method_name(lang, c["best"]), theirs=f"{c['theirs']:.3f}",
                    smape=f"{c['smape']:.2f}" if c["smape"] is not None else ""))
    if not c["panel"]:
        out.append(fill(lang, "shrink.series_base" if c["w"] == 0 else "shrink.series",
                        w=f"{c['w']:.2f}"))
    return out


def _spread(inp, c, lang, kind) -> list[str]:
    t = c["test"]
    if t is None:
        return []
    po, pt = t["ours"], t["theirs"]
    best = method_name(lang, c["best"])
    head = [fill(lang, "col.origin" if kind == "series" else "col.series"),
            method_name(lang, "attention"), best]
    if len(po) <= 30:
        rows = [(escape_tex(lab), f"{a:.3f}", f"{b:.3f}")
                for lab, a, b in zip(inp.origin_labels, po, pt)]
        table = _table(rows, head, fill(lang, f"tab.spread.{kind}"))
    else:                    # hundreds of series: their quantiles, said so in the caption
        qs = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
        rows = [(_pct(q), f"{np.quantile(po, q):.3f}", f"{np.quantile(pt, q):.3f}") for q in qs]
        table = _table(rows, [fill(lang, "col.quantile")] + head[1:],
                       fill(lang, "tab.spread.quantiles", S=len(po)))
    sig = fill(lang, "sig.no" if t["p"] >= 0.05 else "sig.yes")
    return ([f"\\subsubsection*{{{fill(lang, f'h.spread.{kind}')}}}"] + table +
            [fill(lang, f"spread.{kind}", best=best, wins=t["wins"], n=t["n"],
                  lo=f"{po.min():.3f}", hi=f"{po.max():.3f}", blo=f"{pt.min():.3f}",
                  bhi=f"{pt.max():.3f}", stat=f"{t['stat']:.2f}", p=f"{t['p']:.3f}", sig=sig)])


def _ablation(inp, c, lang) -> list[str]:
    ab = inp.ablation
    if ab is None:
        return []
    s = ab.summary()
    rows = [(method_name(lang, k), f"{v['mean']:.3f}" + (f" $\\pm$ {v['std']:.3f}"
                                                         if v["n"] > 1 else ""))
            for k, v in sorted(s.items(), key=lambda kv: kv[1]["mean"])]
    n = len(ab.seeds)
    out = [f"\\subsubsection*{{{fill(lang, 'h.ablation')}}}"]
    out += _table(rows, [fill(lang, "col.method"), "MASE"], fill(lang, "tab.ablation", n=n))
    verdict, pv = c["verdict"], c["verdict_p"]
    ptxt = "" if pv is None else (f"{pv:.2f}" if verdict == "noise" else f"{pv:.3f}")
    alone = next((v["mean"] for k, v in s.items() if k.startswith("base alone")), float("nan"))
    out.append(fill(lang, "ablation", att=f"{s['base + attention']['mean']:.3f}",
                    mean=f"{s['base + mean pooling']['mean']:.3f}",
                    said=fill(lang, f"said.{verdict}", n=n, p=ptxt), alone=f"{alone:.3f}",
                    nobase=f"{s['network, no base']['mean']:.3f}"))
    return out


def _sensitivity(inp, lang) -> list[str]:
    if not inp.sensitivity:
        return []
    rows = [(escape_tex(word(lang, "setting", k)), str(v), f"{e:.3f}")
            for k, vals in inp.sensitivity.items() for v, e in vals]
    out = [f"\\subsubsection*{{{fill(lang, 'h.sensitivity')}}}"]
    out += _table(rows, [fill(lang, "col.setting"), fill(lang, "col.value"), "MASE"],
                  fill(lang, "tab.sensitivity"))
    spans = pieces(lang)["sep.list"].join(
        f"{escape_tex(word(lang, 'setting', k))} {min(e for _, e in v):.3f}--"
        f"{max(e for _, e in v):.3f}" for k, v in inp.sensitivity.items() if v)
    out.append(fill(lang, "sensitivity", spans=spans))
    return out


def _strengths(inp, c, lang) -> list[str]:
    f = lambda name, **kw: fill(lang, name, **kw)           # noqa: E731
    if c.get("unmeasured"):
        return ([f"\\subsection*{{{f('h.strengths')}}}", f"\\textbf{{{f('h.weak')}}}",
                 r"\begin{itemize}", f"  \\item {f('weak.unmeasured', n=c['n_obs'])}"
                 f"{f('item.end')}", r"\end{itemize}"])
    t = c["test"]
    test = ""
    if t is not None:
        test = f(f"test.{t['kind']}", p=f"{t['p']:.3f}", ns=f("test.ns") if t["p"] >= 0.05
                 else "")
    best = method_name(lang, c["best"])
    good, bad = [], []
    mase = dict(ours=f"{c['ours']:.3f}", best=best, theirs=f"{c['theirs']:.3f}", test=test)
    # a difference is a strength or a weakness only where the test tells it from noise
    clear = t is not None and np.isfinite(t["p"]) and t["p"] < 0.05
    if not clear:
        bad.append(f("even.mase", **mase))
    else:
        (good if c["ours"] <= c["theirs"] else bad).append(
            f("strong.mase" if c["ours"] <= c["theirs"] else "weak.mase", **mase))
    good.append(f("strong.shrink"))
    if c["panel"]:
        good.append(f("strong.panel", LH=c["L"] + c["H"], S=c["S"]))
    if c["w"] == 0:
        bad.append(f("weak.w_zero"))
    if inp.ablation is not None:
        verdict, pv = c["verdict"], c["verdict_p"]
        if verdict == "better":
            good.append(f("strong.pooling", p=f"{pv:.3f}"))
        elif verdict == "worse":
            bad.append(f("weak.pooling", p=f"{pv:.3f}"))
        else:
            bad.append(f("weak.pooling_noise", n=len(inp.ablation.seeds)))
    if c["panel"] and any(not np.isfinite(v).any() for v in c["widths"].values()):
        bad.append(f("weak.unbounded", ncal=c["n_cal"]))
    bad.append(f("weak.cost"))
    end = f("item.end")
    return ([f"\\subsection*{{{f('h.strengths')}}}", f"\\textbf{{{f('h.strong')}}}",
             r"\begin{itemize}"] + [f"  \\item {x}{end}" for x in good]
            + [r"\end{itemize}", f"\\textbf{{{f('h.weak')}}}", r"\begin{itemize}"]
            + [f"  \\item {x}{end}" for x in bad] + [r"\end{itemize}"])
