"""The model section of a paper, written from a fitted forecaster and what was measured.

:func:`paper_tex` returns a LaTeX document (``article`` for English, compiled with pdflatex;
``ctexart`` for Chinese, compiled with xelatex) with the sections judges of modelling
competitions (CUMCM, MCM/ICM) look for: motivation, assumptions, a symbol table, the
formulation with the model's real dimensions, the architecture figure, the attention of typical
forecast origins with a sentence on each, the comparison with the baselines, the ablation and
the sensitivity analysis. Every number in the text comes from the fitted model or from a
measurement passed in; a section whose measurement was not run is left out, never filled with
a claim. :func:`undefined_symbols` checks that every symbol the equations use is defined.
Figures are drawn by the caller (``attnlab paper`` draws them with :mod:`attnlab.plots`) and
passed by file name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from attnlab.models.latex import Equations, escape_tex, text_with_math

LANGS = ("en", "zh")

_T = {
    "en": {
        "title": "Model: attention over past observations, correcting a statistical forecast",
        "motivation": "Motivation",
        "assumptions": "Assumptions",
        "symbols": "Symbols",
        "formulation": "Formulation",
        "architecture": "Architecture",
        "cases": "Attention in typical cases",
        "results": "Results",
        "comparison": "Comparison with baselines",
        "ablation": "Ablation",
        "sensitivity": "Sensitivity and robustness",
        "estimation": "Estimation",
        "spread": "Spread across origins",
        "strengths": "Strengths and weaknesses",
        "symbol": "Symbol", "meaning": "Meaning", "method": "Method", "value": "Value",
        "setting": "Setting",
        "fig_arch": "Structure of the fitted model, with its dimensions.",
        "fig_att": "Attention weight over the past {L} steps (columns) at each forecast origin "
                   "(rows) of the backtest.",
        "tab_cmp": "Rolling-origin backtest on {series}: {k} origins, horizon {H}.",
        "tab_abl": "Ablation over {n} seeds (MASE, mean $\\pm$ standard deviation).",
        "tab_sen": "MASE when one setting changes (the others at their defaults).",
        "fig_bt": "Forecasts against the actual values at each backtest origin, with this "
                  "model's split-conformal 80\\% and 95\\% intervals.",
    },
    "zh": {
        "title": "模型：以注意力加权历史观测，修正统计预测",
        "motivation": "建模动机",
        "assumptions": "模型假设",
        "symbols": "符号说明",
        "formulation": "模型建立",
        "architecture": "模型结构",
        "cases": "典型情形下的注意力",
        "results": "结果分析",
        "comparison": "与基准方法的比较",
        "ablation": "消融实验",
        "sensitivity": "灵敏度与稳健性分析",
        "estimation": "参数估计",
        "spread": "各预测起点上的误差分布",
        "strengths": "模型的优缺点",
        "symbol": "符号", "meaning": "含义", "method": "方法", "value": "取值",
        "setting": "参数",
        "fig_arch": "拟合所得模型的结构及其维度。",
        "fig_att": "回测中每个预测起点（行）对过去 {L} 步（列）的注意力权重。",
        "tab_cmp": "{series} 上的滚动起点回测：{k} 个起点，预测步长 {H}。",
        "tab_abl": "{n} 个随机种子下的消融实验（MASE，均值 $\\pm$ 标准差）。",
        "tab_sen": "单个参数变化时的 MASE（其余参数取默认值）。",
        "fig_bt": "各回测起点上的预测值与实际值，以及本模型的分裂共形 80\\% 与 95\\% 预测区间。",
    },
}

BASE_NAMES = {
    "en": {"seasonal_naive": "seasonal naive", "naive": "naive (the last value)",
           "drift": "the random walk with drift",
           "ets": "Holt--Winters exponential smoothing (ETS)", "ar": "an autoregression (AR)",
           "arima": "an ARIMA model", "theta": "the Theta method",
           "combination": "the median of ETS, ARIMA and Theta",
           "none": "no statistical base (the series mean)"},
    "zh": {"seasonal_naive": "季节朴素法", "naive": "朴素法（取最后一个观测值）",
           "drift": "带漂移的随机游走", "ets": "Holt--Winters 指数平滑（ETS）",
           "ar": "自回归模型（AR）", "arima": "ARIMA 模型", "theta": "Theta 方法",
           "combination": "ETS、ARIMA 与 Theta 的中位数组合",
           "none": "无统计基准（序列均值）"},
}


@dataclass
class PaperInputs:
    """What the paper is written from. ``backtest``: a
    :class:`~attnlab.models.forecast.backtest.BacktestResult` of ``model``'s settings;
    ``ablation``: an :class:`~attnlab.models.forecast.ablation.AblationResult` or None;
    ``sensitivity``: ``{setting: [(value, MASE), ...]}`` or None; ``figures``:
    ``{"architecture": file, "attention": file}`` relative to the .tex file;
    ``origin_labels``: the backtest origins as dates or steps; ``draft``: ``{lang: why the
    numbers are preliminary}`` (e.g. a quick run), printed as a draft mark on every page, or
    None."""

    model: object
    backtest: object
    series: str
    origin_labels: list[str]
    figures: dict[str, str] = field(default_factory=dict)
    ablation: object = None
    sensitivity: dict | None = None
    y: object = None                      # the series, for the forecast-vs-actual figure
    draft: dict | None = None             # why the numbers are preliminary, per language


# ---------------------------------------------------------------------------- symbol check

_FUNCS = re.compile(r"\\(mathrm|mathbb|text|operatorname)\{[^{}]*\}")
_DROP = re.compile(r"\\(left|right|frac|sqrt|sum|quad|qquad|ldots|cdots|lceil|rceil|in|top|"
                   r"times|exp|log|sin|cos|bmod|cdot|overrightarrow|overleftarrow|big|Big|"
                   r"max|min|pi)\b")
_BOLD = re.compile(r"\\(mathbf|boldsymbol)\{([A-Za-z])\}")
_HAT = re.compile(r"\\(hat|tilde|bar)\{([A-Za-z])\}")
_GREEK = re.compile(r"\\(alpha|beta|gamma|delta|Delta|epsilon|zeta|eta|theta|lambda|mu|nu|xi|"
                    r"rho|sigma|tau|phi|varphi|chi|psi|omega|Omega|Sigma|Phi)\b")
INDICES = frozenset({"t", "h", "tau", "i", "j", "k", "l", "m"})


_SUP = re.compile(r"\^(\{[^{}]*(\{[^{}]*\}[^{}]*)*\}|\\?[A-Za-z0-9]+)")
_SUB = re.compile(r"_(\{[^{}]*(\{[^{}]*\}[^{}]*)*\}|[A-Za-z0-9])")


def _names(tex: str) -> set[str]:
    """Base names of the symbols in a piece of math: ``bf:W``, ``hat:y``, ``alpha``, ``y``,
    ``cal:N``. Superscripts are labels (``W^Q``, ``a^{(k)}``); in subscripts only capital
    letters count (sizes such as the L of ``h_L``), lowercase ones are indices or labels."""
    s = _FUNCS.sub(" ", tex)
    found = {f"cal:{m.group(1)}" for m in re.finditer(r"\\mathcal\{([A-Za-z])\}", s)}
    s = re.sub(r"\\mathcal\{[A-Za-z]\}", " ", s)
    s = _SUP.sub(" ", s)
    s = _SUB.sub(lambda m: " " + " ".join(re.findall(r"(?<![A-Za-z\\])[A-Z](?![A-Za-z])",
                                                     m.group(1))) + " ", s)
    found |= {f"bf:{m.group(2)}" for m in _BOLD.finditer(s)}
    s = _BOLD.sub(" ", s)
    found |= {f"hat:{m.group(2)}" for m in _HAT.finditer(s)}
    s = _HAT.sub(" ", s)
    found |= {m.group(1) for m in _GREEK.finditer(s)}
    s = _GREEK.sub(" ", s)
    s = _DROP.sub(" ", s)
    s = re.sub(r"\\[A-Za-z]+", " ", s)                  # any other command: not a symbol
    found |= set(re.findall(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])", s))
    return found


def undefined_symbols(eq: Equations, extra: list[tuple[str, str]] = ()) -> set[str]:
    """Symbols the equations use that neither an equation's left-hand side nor the symbol
    table (``eq.where`` and ``extra``) defines; index letters (t, h, tau, ...) are exempt."""
    defined, used = set(), set()
    for lhs, rhs in eq.lines:
        defined |= _names(lhs)
        # "a = ..., \quad b = ...": the later definitions on one line define b
        for part in re.split(r"\\quad|,\s*\\;", rhs):
            if "=" in part and not part.strip().startswith(("t =", "h =", "j =", "l =")):
                left, right = part.split("=", 1)
                defined |= _names(left)
                used |= _names(right)
            elif r"\in \mathbb" in part and part is not rhs:     # "\quad W \in R^{a x b}"
                for decl in part.split(r"\in \mathbb")[:-1]:
                    defined |= _names(decl.split(",")[-1])
            else:
                used |= _names(part)
    for sym, _ in list(eq.where) + list(extra):
        defined |= _names(sym)
    return used - defined - INDICES


# ----------------------------------------------------------------------------- the document


def _zh_meaning(model, sym: str, meaning: str) -> str:
    """The Chinese meaning of one of the forecaster's symbols (its English one if unknown)."""
    L, m = model.effective_lookback, model.effective_season
    base = BASE_NAMES["zh"].get(getattr(model, "base_name_", model.base), "基准模型")
    table = [
        ("y_1", f"最近 {L} 个观测（回看窗口）"),
        (r"\mu", "训练序列的均值与标准差"),
        (r"s_\Delta", "训练窗口上，目标值相对基准预测之变化的标准差"),
        ("w", "网络修正项的权重，取值于 [0, 1]，在验证窗口上以最小二乘确定"
              + (f"（拟合值 w = {model.shrink_:.2f}"
                 + ("，即预测仅为基准预测）" if model.shrink_ == 0 else "）")
                 if hasattr(model, "shrink_") else "")),
        (r"\mathbf{W}_q", "查询与键的投影矩阵"),
        (r"\mathbf{W}_1", "输出层的权重矩阵"),
        (r"\mathbf{b}_q", "查询、键投影及输出层的偏置向量"),
        (r"\mathbf{X}", f"以 \\(\\mathbf{{x}}_t\\) 为行的 {L} 行矩阵及到隐藏维度的输入投影"),
        (r"\hat{y}^{\mathrm{base}}", f"{base}在训练序列上拟合后的 h 步预测（网络所修正的基准）"),
        (r"\mathbf{z}_t", f"第 t 步的 {getattr(model, 'n_exog_', 0)} 个外生变量"
                          "（按训练均值与标准差标准化）"),
        (r"\phi_t", f"\\(\\phi_t = 2\\pi (t \\bmod {m}) / {m}\\)，季节内的相位"),
        (r"\mathbf{P}", "正弦位置编码（Vaswani 等，2017）及编码器层"),
    ]
    for prefix, zh in table:
        if sym.startswith(prefix):
            return zh
    return meaning


def _symbol_rows(model, lang) -> list[tuple[str, str]]:
    """The symbols the text uses beyond the equations' own."""
    L, H = model.effective_lookback, model.horizon
    if lang == "zh":
        return [("L", f"回看窗口长度（模型读取的过去观测数），L = {L}"),
                ("H", f"预测步长（一次预测的步数），H = {H}"),
                ("h", "预测步序号，h = 1, ..., H"),
                (r"\mathrm{MASE}", "平均绝对误差除以训练段上季节朴素法的平均绝对误差")]
    return [("L", f"lookback, the number of past observations the model reads (L = {L})"),
            ("H", f"horizon, the number of steps forecast at once (H = {H})"),
            ("h", "the forecast step, h = 1, ..., H"),
            (r"\mathrm{MASE}", "mean absolute error divided by the in-sample mean absolute "
                               "error of seasonal naive (Hyndman and Koehler 2006)")]


_METHODS = {
    "en": {"attention": "this model", "seasonal_naive": "seasonal naive", "ets": "ETS",
           "ar": "AR", "arima": "ARIMA", "theta": "Theta", "drift": "drift",
           "combination": "median of ETS, ARIMA, Theta", "base + attention": "base + attention",
           "base + mean pooling": "base + mean pooling", "network, no base": "network, no base",
           "base alone": "base alone"},
    "zh": {"attention": "本模型", "seasonal_naive": "季节朴素法", "ets": "ETS", "ar": "AR",
           "arima": "ARIMA", "theta": "Theta", "drift": "带漂移随机游走",
           "combination": "ETS、ARIMA、Theta 的中位数",
           "base + attention": "基准 + 注意力", "base + mean pooling": "基准 + 平均池化",
           "network, no base": "无基准的网络", "base alone": "仅用基准"},
}


def _method(name: str, lang: str) -> str:
    names = _METHODS[lang]
    if name.startswith("base alone (") and name.endswith(")"):
        inner = name[len("base alone ("):-1]
        return f"{names['base alone']} ({escape_tex(names.get(inner, inner))})"
    return escape_tex(names.get(name, name))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}\\%"                    # a bare % would start a TeX comment


def _typical(att: np.ndarray) -> dict[str, int]:
    """Origins worth a sentence: the most concentrated and the most spread attention."""
    ent = -(att * np.log(np.clip(att, 1e-12, None))).sum(1)
    return {"concentrated": int(np.argmin(ent)), "spread": int(np.argmax(ent))}


def _sentences_cases(inp: PaperInputs, lang: str) -> list[str]:
    att = np.asarray(inp.backtest.attention, dtype=float)          # (origins, L)
    L = att.shape[1]
    if inp.model.pool == "mean":
        return ["The model was fitted with uniform weights (mean pooling): there is no "
                "attention to show." if lang == "en" else "该模型使用均匀权重（平均池化），"
                "没有注意力可展示。"]
    out = []
    mean = att.mean(0)
    lo, hi = float(att.min()), float(att.max())
    if hi - lo < 0.2 / L:                                # within 20% of uniform everywhere
        if lang == "en":
            return [f"The weights are close to uniform at every origin (between {lo:.4f} and "
                    f"{hi:.4f}, against 1/L = {1 / L:.4f}): the attention singles out no lag "
                    "here."]
        return [f"各起点的权重都接近均匀（介于 {lo:.4f} 与 {hi:.4f} 之间，1/L = {1 / L:.4f}）："
                "此处注意力没有突出任何滞后。"]
    top = np.argsort(mean)[::-1][:3]
    lags = ", ".join(str(L - int(j)) for j in top)
    share = float(mean[top].sum())
    if lang == "en":
        out.append(f"Averaged over the {len(att)} origins, the lags with the most weight are "
                   f"{lags} steps before the origin; together they receive {_pct(share)} of it "
                   f"(a uniform weighting would give them {_pct(3 / L)}).")
    else:
        out.append(f"在 {len(att)} 个预测起点上取平均，权重最大的滞后为起点之前的 {lags} 步，"
                   f"合计占 {_pct(share)}（均匀加权时为 {_pct(3 / L)}）。")
    for kind, i in _typical(att).items():
        j = int(np.argmax(att[i]))
        w = float(att[i, j])
        label = escape_tex(inp.origin_labels[i])
        if lang == "en":
            what = ("the most concentrated attention" if kind == "concentrated"
                    else "the most spread-out attention")
            out.append(f"At the origin {label} ({what}), the largest weight, {_pct(w)}, is on "
                       f"lag {L - j}.")
        else:
            what = "注意力最集中" if kind == "concentrated" else "注意力最分散"
            out.append(f"在起点 {label}（{what}），最大权重 {_pct(w)} 落在滞后 {L - j} 步。")
    return out


def _table(rows, header, caption, cols: str | None = None) -> list[str]:
    cols = cols or "l" + "r" * (len(header) - 1)
    out = [r"\begin{table}[!htbp]", r"\centering", f"\\caption{{{caption}}}",
           f"\\begin{{tabular}}{{{cols}}}", r"\toprule",
           " & ".join(header) + r" \\", r"\midrule"]
    out += [" & ".join(r) + r" \\" for r in rows]
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return out


# the article by sound: "a GRU" (gee), "an LSTM" (el)
ENCODER_EN = {"gru": "a GRU", "lstm": "an LSTM", "transformer": "a Transformer"}


def _draft_mark(draft: dict | None, lang: str) -> list[str]:
    """Preamble lines that print a draft notice at the top of every page (fancyhdr)."""
    if not draft:
        return []
    head = ("DRAFT: " if lang == "en" else "草稿：") + escape_tex(draft[lang])
    return [r"\usepackage{fancyhdr}", r"\pagestyle{fancy}", r"\fancyhf{}",
            f"\\fancyhead[C]{{\\small\\textbf{{{head}}}}}", r"\fancyfoot[C]{\thepage}",
            r"\renewcommand{\headrulewidth}{0.4pt}"]


def paper_tex(inp: PaperInputs, lang: str = "en") -> str:
    """The document (see the module docstring)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    t = _T[lang]
    m = inp.model
    eq = m.equations()
    L, H, d = m.effective_lookback, m.horizon, m.hidden_size
    base = getattr(m, "base_name_", m.base)
    bname = BASE_NAMES[lang].get(base, base)
    series = escape_tex(inp.series)
    metrics = inp.backtest.metrics
    best = min((k for k in metrics if k != "attention"), key=lambda k: metrics[k]["MASE"])
    ours = metrics["attention"]["MASE"]
    doc = ([r"\documentclass[11pt]{ctexart}" if lang == "zh" else r"\documentclass[11pt]{article}"]
           + [r"\usepackage{amsmath,amssymb,graphicx,booktabs}",
              r"\usepackage[margin=2.5cm]{geometry}"]
           + _draft_mark(inp.draft, lang)
           + [r"\begin{document}", f"\\section*{{{t['title']}}}"])
    w = float(getattr(m, "shrink_", 1.0))
    if w == 0:                          # say first which model forecasts
        doc.append(
            f"\\textbf{{The forecasts are those of the base, {bname}.}} On the validation "
            "windows the attention network's correction did not improve on the base, so its "
            "weight is $w = 0$; the network below is described for completeness and enters the "
            "results only as an ablation." if lang == "en" else
            f"\\textbf{{预测即基准模型（{bname}）的预测。}}在验证窗口上，注意力网络的修正未能"
            "改进基准，故其权重 $w = 0$；下文对网络的描述仅为完整起见，网络只作为消融实验出现。")
    # motivation
    doc.append(f"\\subsection*{{{t['motivation']}}}")
    if lang == "en":
        doc.append(
            f"A statistical model such as {bname} weighs the past with weights fixed when it is "
            f"fitted, and a fixed window treats every one of its {L} steps alike at every "
            "forecast. Which past observations matter changes with the position in the season "
            "and with recent events, so the model below keeps the statistical forecast as its "
            "base and lets an attention layer choose, at each forecast origin, how much each of "
            f"the last {L} observations counts for the correction of that base.")
    else:
        doc.append(
            f"{bname}等统计模型在拟合时即固定了对历史的加权方式，固定窗口则在每次预测时对窗口内"
            f"的 {L} 步一视同仁。哪些历史观测更重要，会随季节中的位置和近期事件而变化。因此下述"
            f"模型保留统计预测作为基准，由注意力层在每个预测起点决定最近 {L} 个观测各自对修正该"
            "基准的贡献。")
    # assumptions
    doc.append(f"\\subsection*{{{t['assumptions']}}}")
    items_en = ["The series is observed at regular steps with no missing values (the reader "
                "refuses gaps instead of filling them).",
                f"The base, {bname}, captures the level" + (" and the season" if
                                                            m.effective_season > 1 else "")
                + "; what it leaves is a function of the last "
                f"{L} observations that stays the same after the training period.",
                "Exogenous columns, if any, are known only up to the forecast origin."
                if getattr(m, "n_exog_", 0) else "No exogenous information is used.",
                "Errors are compared on the same origins for every method (MASE, scaled by "
                "the in-sample error of seasonal naive)."]
    items_zh = ["序列按等间隔观测且无缺失值（读取时拒绝缺口，不做填补）。",
                f"基准模型（{bname}）刻画了水平" + ("与季节性" if m.effective_season > 1 else "")
                + f"；其残差是最近 {L} 个观测的函数，且在训练期之后保持不变。",
                "外生变量（若有）仅在预测起点之前已知。" if getattr(m, "n_exog_", 0)
                else "不使用外生信息。",
                "所有方法在相同的预测起点上比较误差（MASE，以训练段季节朴素法的误差为尺度）。"]
    doc += [r"\begin{enumerate}"] + [f"  \\item {x}" for x in
                                     (items_zh if lang == "zh" else items_en)] + \
        [r"\end{enumerate}"]
    # symbols
    doc.append(f"\\subsection*{{{t['symbols']}}}")
    where = [(sym, _zh_meaning(m, sym, w) if lang == "zh" else w) for sym, w in eq.where]
    sym_rows = [(f"${s}$", text_with_math(w)) for s, w in where + _symbol_rows(m, lang)]
    doc += _table(sym_rows, [t["symbol"], t["meaning"]], t["symbols"],
                  cols=r"lp{0.68\linewidth}")
    # formulation
    doc.append(f"\\subsection*{{{t['formulation']}}}")
    if lang == "en":
        doc.append(
            f"Each forecast reads the last $L = {L}$ observations. Every step $t$ becomes a "
            f"feature vector $\\mathbf{{x}}_t$; {ENCODER_EN[m.encoder]} encoder turns them into "
            f"states $\\mathbf{{h}}_t$ of size {d}. The query is built from the last state, the "
            "keys from every state by a linear map, and the values are the states themselves; "
            "the attention output $\\mathbf{c}$ and the last state feed a two-layer output "
            f"network whose {H} outputs correct the base forecast:")
    else:
        doc.append(
            f"每次预测读取最近 $L = {L}$ 个观测。每一步 $t$ 构成特征向量 $\\mathbf{{x}}_t$，"
            f"经 {m.encoder.upper()} 编码为维度 {d} 的状态 $\\mathbf{{h}}_t$。查询由最后一个状态"
            "线性变换得到，键由每个状态线性变换得到，值即状态本身；注意力输出 $\\mathbf{c}$ "
            f"与最后一个状态一起送入两层输出网络，其 {H} 个输出用于修正基准预测：")
    body = eq.to_latex().split("\n")
    start = body.index(r"\begin{align}")
    stop = body.index(r"\end{align}")
    doc += body[start:stop + 1]
    doc += _estimation(m, lang, t)
    # architecture
    if "architecture" in inp.figures:
        doc += [r"\begin{figure}[!htbp]", r"\centering",
                f"\\includegraphics[width=\\linewidth]{{{inp.figures['architecture']}}}",
                f"\\caption{{{t['fig_arch']}}}", r"\end{figure}"]
    # typical cases
    doc.append(f"\\subsection*{{{t['cases']}}}")
    if w == 0:
        doc.append("With $w = 0$ the attention weights do not reach the forecast; they are not "
                   "interpreted here." if lang == "en" else
                   "由于 $w = 0$，注意力权重不影响预测，此处不作解读。")
    elif "attention" in inp.figures and m.pool != "mean":
        doc += [r"\begin{figure}[!htbp]", r"\centering",
                f"\\includegraphics[width=0.9\\linewidth]{{{inp.figures['attention']}}}",
                f"\\caption{{{t['fig_att'].format(L=L)}}}", r"\end{figure}"]
    if w > 0:
        doc.append(" ".join(_sentences_cases(inp, lang)))
    # results
    doc.append(f"\\subsection*{{{t['results']}}}")
    doc.append(f"\\subsubsection*{{{t['comparison']}}}")
    rows = [(_method(k, lang), f"{v['MAE']:.3f}",
             f"{v['RMSE']:.3f}", f"{v['MASE']:.3f}")
            for k, v in sorted(metrics.items(), key=lambda kv: kv[1]["MASE"])]
    doc += _table(rows, [t["method"], "MAE", "RMSE", "MASE"],
                  t["tab_cmp"].format(series=series, k=len(inp.backtest.origins), H=H))
    if "backtest" in inp.figures:
        doc += [r"\begin{figure}[!htbp]", r"\centering",
                f"\\includegraphics[width=\\linewidth]{{{inp.figures['backtest']}}}",
                f"\\caption{{{t['fig_bt']}}}", r"\end{figure}"]
    cover = inp.backtest.coverage() if hasattr(inp.backtest, "coverage") else {}
    if cover:
        doc.append((("At the held-out origins the 80\\% interval covered "
                     f"{_pct(cover.get(0.8, float('nan')))} of the actual values and the 95\\% "
                     f"interval {_pct(cover.get(0.95, float('nan')))}.") if lang == "en" else
                    (f"在留出的预测起点上，80\\% 区间覆盖了 {_pct(cover.get(0.8, float('nan')))} "
                     f"的实际值，95\\% 区间覆盖了 {_pct(cover.get(0.95, float('nan')))}。"))
                   + _coverage_comment(cover, np.asarray(inp.backtest.actual).size, lang))
    verdict_en = ("at or below" if ours <= metrics[best]["MASE"] else "above")
    if lang == "en":
        doc.append(f"This model's MASE is {ours:.3f}, {verdict_en} the best baseline "
                   f"({_method(best, lang)}, {metrics[best]['MASE']:.3f}).")
        doc.append(f"On the held-out validation windows before the first origin, the weight "
                   f"of the network's correction was set to $w = {w:.2f}$ (least squares in "
                   "$[0, 1]$)" + (": the correction did not beat the base there, so the "
                                  "forecasts are the base's." if w == 0 else "."))
    else:
        rel = "不高于" if ours <= metrics[best]["MASE"] else "高于"
        doc.append(f"本模型的 MASE 为 {ours:.3f}，{rel}最佳基准方法"
                   f"（{_method(best, lang)}，{metrics[best]['MASE']:.3f}）。")
        doc.append(f"在第一个预测起点之前留出的验证窗口上，网络修正项的权重取 $w = {w:.2f}$"
                   "（在 $[0, 1]$ 内最小二乘）"
                   + ("：修正项在验证集上不优于基准，故预测即为基准预测。" if w == 0 else "。"))
    doc += _spread(inp, best, lang, t)
    if inp.ablation is not None:
        ab = inp.ablation
        s = ab.summary()
        doc.append(f"\\subsubsection*{{{t['ablation']}}}")
        rows = [(_method(k, lang), f"{v['mean']:.3f}" + (f" $\\pm$ {v['std']:.3f}" if v["n"] > 1
                                                       else ""))
                for k, v in sorted(s.items(), key=lambda kv: kv[1]["mean"])]
        doc += _table(rows, [t["method"], "MASE"], t["tab_abl"].format(n=len(ab.seeds)))
        att, mean_pool = s["base + attention"]["mean"], s["base + mean pooling"]["mean"]
        nobase = s["network, no base"]["mean"]
        alone = s[f"base alone ({ab.base})"]["mean"]
        verdict, pv = pooling_verdict(ab)
        n = len(ab.seeds)
        ptxt = "" if pv is None else (f"{pv:.2f}" if verdict == "noise" else f"{pv:.3f}")
        if lang == "en":
            said = (f"within noise: {n} seeds are too few for a test" if verdict == "few" else
                    f"within noise (paired t-test over {n} seeds, $p = {ptxt}$)"
                    if verdict == "noise" else
                    f"attention is {verdict} (paired t-test over {n} seeds, $p = {ptxt}$)")
            doc.append(f"Attention against mean pooling: {att:.3f} against {mean_pool:.3f}, "
                       f"{said}. The base alone scores {alone:.3f} and the network without a "
                       f"base {nobase:.3f}.")
        else:
            said = (f"差异在噪声范围内：{n} 个随机种子不足以做检验" if verdict == "few" else
                    f"差异在噪声范围内（{n} 个种子的配对 t 检验，$p = {ptxt}$）"
                    if verdict == "noise" else
                    f"注意力{'更好' if verdict == 'better' else '更差'}（{n} 个种子的配对 t 检验，"
                    f"$p = {ptxt}$）")
            doc.append(f"注意力与平均池化相比：{att:.3f} 对 {mean_pool:.3f}，{said}。"
                       f"仅用基准模型为 {alone:.3f}，不用基准的网络为 {nobase:.3f}。")
    if inp.sensitivity:
        doc.append(f"\\subsubsection*{{{t['sensitivity']}}}")
        rows = [(escape_tex(k), str(v), f"{e:.3f}") for k, vals in inp.sensitivity.items()
                for v, e in vals]
        doc += _table(rows, [t["setting"], t["value"], "MASE"], t["tab_sen"])
        spans = {k: (min(e for _, e in v), max(e for _, e in v))
                 for k, v in inp.sensitivity.items()}
        if lang == "en":
            doc.append("Range of MASE per setting: " + "; ".join(
                f"{escape_tex(k)} {lo:.3f}--{hi:.3f}" for k, (lo, hi) in spans.items()) + ".")
        else:
            doc.append("各参数下 MASE 的范围：" + "；".join(
                f"{escape_tex(k)} {lo:.3f}--{hi:.3f}" for k, (lo, hi) in spans.items()) + "。")
    doc += _strengths(inp, best, lang, t)
    doc.append(r"\end{document}")
    return "\n".join(doc) + "\n"


def _estimation(m, lang: str, t: dict) -> list[str]:
    """Loss, optimiser, early stopping, validation split and the shrink, from the fit."""
    hist = getattr(m, "history_", None)
    epochs = getattr(hist, "epochs", None)
    best_epoch = getattr(hist, "best_epoch", None)
    w = float(getattr(m, "shrink_", 1.0))
    ran = (f" It ran {epochs} epochs and kept the weights of epoch {best_epoch}."
           if epochs is not None else "")
    ran_zh = (f"本次训练共 {epochs} 轮，保留第 {best_epoch} 轮的权重。"
              if epochs is not None else "")
    eq = (r"\begin{equation*} w = \min\Bigl(1, \max\Bigl(0, \frac{\sum_{n,h} o_{n,h} "
          r"\, r_{n,h}}{\sum_{n,h} o_{n,h}^2}\Bigr)\Bigr) \end{equation*}")
    if lang == "zh":
        return [f"\\subsection*{{{t['estimation']}}}",
                "网络以训练窗口上的均方误差为损失，目标为真实值相对基准预测的变化除以 "
                f"$s_\\Delta$；优化器为 AdamW（学习率 {m.lr:g}，权重衰减 {m.weight_decay:g}，"
                f"批量 {m.batch_size}，梯度范数裁剪 {m.clip_norm:g}）。最后 "
                f"{_pct(m.val_fraction)} 的训练窗口留作验证：验证损失连续 {m.patience} 轮未下降"
                f"即停止（至多 {m.max_epochs} 轮），并恢复验证损失最小的权重。{ran_zh}"
                "随后在同一验证窗口上按最小二乘确定修正项权重 $w$（$o$ 为网络输出，$r$ 为目标）：",
                eq, f"拟合得 $w = {w:.2f}$。"]
    return [f"\\subsection*{{{t['estimation']}}}",
            "The network minimises the mean squared error, over the training windows, of its "
            "output against the target's change from the base forecast divided by "
            f"$s_\\Delta$, with AdamW (learning rate {m.lr:g}, weight decay "
            f"{m.weight_decay:g}, batch {m.batch_size}, gradient norm clipped at "
            f"{m.clip_norm:g}). The last {_pct(m.val_fraction)} of the training windows are "
            f"held out: training stops when their loss has not fallen for {m.patience} epochs "
            f"(at most {m.max_epochs}) and the weights with the lowest validation loss are "
            f"restored.{ran} On the same windows the weight of the correction is the least "
            "squares $w$ in $[0, 1]$ ($o$ the network's outputs, $r$ the targets):",
            eq, f"The fit gave $w = {w:.2f}$."]


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


def _dm_p(inp: PaperInputs, best: str) -> float | None:
    """The Diebold-Mariano p-value of the model against ``best`` on the per-origin errors."""
    from attnlab.models.forecast.baselines import diebold_mariano

    bt = inp.backtest
    actual = np.asarray(bt.actual, dtype=float)
    if len(actual) < 3 or best not in bt.forecasts:
        return None
    ours = np.abs(np.asarray(bt.forecasts["attention"]) - actual).mean(1)
    theirs = np.abs(np.asarray(bt.forecasts[best]) - actual).mean(1)
    return float(diebold_mariano(ours, theirs)[1])


def _coverage_comment(cover: dict, n: int, lang: str) -> str:
    """A sentence for each level whose coverage over ``n`` test values is off its nominal
    level beyond chance (a two-sided binomial test at 5%)."""
    from scipy.stats import binomtest

    out = []
    for q, c in sorted(cover.items()):
        if not np.isfinite(c) or n < 1 or binomtest(round(c * n), n, q).pvalue >= 0.05:
            continue
        narrow = c < q
        if lang == "en":
            out.append(f" The {_pct(q)} interval is too {'narrow' if narrow else 'wide'} here: "
                       f"its widths come from held-out errors "
                       f"{'smaller' if narrow else 'larger'} than the test period's.")
        else:
            out.append(f"{_pct(q)} 区间在此{'偏窄' if narrow else '偏宽'}：其宽度来自的留出误差"
                       f"{'小于' if narrow else '大于'}测试期的误差。")
    return "".join(out)


def _spread(inp: PaperInputs, best: str, lang: str, t: dict) -> list[str]:
    """Per-origin MASE of the model and the best baseline, and a Diebold-Mariano test."""
    from attnlab.models.forecast.baselines import diebold_mariano

    bt = inp.backtest
    actual = np.asarray(bt.actual, dtype=float)
    if len(actual) < 3 or best not in bt.forecasts:
        return []
    scale = bt.metrics["attention"]["MAE"] / bt.metrics["attention"]["MASE"] \
        if bt.metrics["attention"]["MASE"] else 1.0
    ours = np.abs(np.asarray(bt.forecasts["attention"]) - actual)
    theirs = np.abs(np.asarray(bt.forecasts[best]) - actual)
    po, pt = ours.mean(1) / scale, theirs.mean(1) / scale
    stat, p = diebold_mariano(ours.mean(1), theirs.mean(1))
    wins = int((po < pt).sum())
    rows = [(escape_tex(lab), f"{a:.3f}", f"{b:.3f}") for lab, a, b in
            zip(inp.origin_labels, po, pt)]
    head = ["origin" if lang == "en" else "起点", _method("attention", lang), _method(best, lang)]
    cap = ("MASE at each origin." if lang == "en" else "各预测起点上的 MASE。")
    out = [f"\\subsubsection*{{{t['spread']}}}"] + _table(rows, head, cap)
    if lang == "en":
        out.append(f"This model is better than {_method(best, lang)} at {wins} of {len(po)} "
                   f"origins (MASE {po.min():.3f}--{po.max():.3f} against "
                   f"{pt.min():.3f}--{pt.max():.3f}). A Diebold--Mariano test on the per-origin "
                   f"mean absolute errors (Harvey et al. small-sample form) gives "
                   f"$t = {stat:.2f}$, $p = {p:.3f}$"
                   + (": the difference is not significant at 5\\%." if p >= 0.05 else "."))
    else:
        out.append(f"本模型在 {len(po)} 个起点中的 {wins} 个优于{_method(best, lang)}（MASE "
                   f"{po.min():.3f}--{po.max():.3f}，对方 {pt.min():.3f}--{pt.max():.3f}）。"
                   "对各起点平均绝对误差作 Diebold--Mariano 检验（Harvey 等的小样本形式），"
                   f"$t = {stat:.2f}$，$p = {p:.3f}$"
                   + ("，在 5\\% 水平下差异不显著。" if p >= 0.05 else "。"))
    return out


def _strengths(inp: PaperInputs, best: str, lang: str, t: dict) -> list[str]:
    """What the measurements support for and against the model."""
    m, metrics = inp.model, inp.backtest.metrics
    ours, theirs = metrics["attention"]["MASE"], metrics[best]["MASE"]
    w = float(getattr(m, "shrink_", 1.0))
    good, bad = [], []
    en = lang == "en"
    p = _dm_p(inp, best)
    test = ("" if p is None else
            (f" (Diebold--Mariano $p = {p:.3f}$" + (": not a significant difference)"
                                                   if p >= 0.05 else ")")) if en else
            (f"（Diebold--Mariano 检验 $p = {p:.3f}$" + ("，差异不显著）" if p >= 0.05
                                                      else "）")))
    if ours <= theirs:
        good.append(f"its MASE ({ours:.3f}) is at or below the best baseline's, "
                    f"{_method(best, lang)} ({theirs:.3f}){test}"
                    if en else
                    f"MASE（{ours:.3f}）不高于最佳基准{_method(best, lang)}（{theirs:.3f}）{test}")
    else:
        bad.append(f"its MASE ({ours:.3f}) is above the best baseline's, "
                   f"{_method(best, lang)} ({theirs:.3f}){test}" if en
                   else f"MASE（{ours:.3f}）高于最佳基准{_method(best, lang)}（{theirs:.3f}）"
                   f"{test}")
    good.append("the correction is kept only as far as it helps on held-out windows that "
                "neither trained nor stopped the network (the least-squares $w$), and $w = 0$ "
                "falls back to the base" if en else
                "修正项只在未参与训练与早停的留出窗口上有益时才保留（最小二乘权重 $w$），"
                "$w = 0$ 时退回基准")
    if w == 0:
        bad.append("the attention network adds nothing on this series ($w = 0$)" if en
                   else "在该序列上注意力网络没有贡献（$w = 0$）")
    ab = inp.ablation
    if ab is not None:
        verdict, pv = pooling_verdict(ab)
        if verdict == "better":
            good.append(f"attention pooling beats mean pooling in the ablation (paired t-test, "
                        f"$p = {pv:.3f}$)" if en else
                        f"消融实验中注意力池化优于平均池化（配对 t 检验，$p = {pv:.3f}$）")
        elif verdict == "worse":
            bad.append(f"attention pooling is worse than mean pooling in the ablation (paired "
                       f"t-test, $p = {pv:.3f}$)" if en else
                       f"消融实验中注意力池化劣于平均池化（配对 t 检验，$p = {pv:.3f}$）")
        else:
            bad.append("the ablation cannot tell attention pooling from mean pooling "
                       f"({len(ab.seeds)} seeds)" if en else
                       f"消融实验无法区分注意力池化与平均池化（{len(ab.seeds)} 个种子）")
    bad.append("a network costs seconds to minutes to fit where the statistical methods take "
               "milliseconds" if en else "网络的拟合耗时为秒到分钟级，统计方法仅需毫秒级")
    head = ("Strengths" if en else "优点"), ("Weaknesses" if en else "缺点")
    return ([f"\\subsection*{{{t['strengths']}}}", f"\\textbf{{{head[0]}}}:", r"\begin{itemize}"]
            + [f"  \\item {x}." if en else f"  \\item {x}。" for x in good]
            + [r"\end{itemize}", f"\\textbf{{{head[1]}}}:", r"\begin{itemize}"]
            + [f"  \\item {x}." if en else f"  \\item {x}。" for x in bad] + [r"\end{itemize}"])


# ----------------------------------------------------------------- tables and graphs (fit)

_GENERIC = {
    "en": {"title": "Model: {name}", "results": "Results", "symbols": "Symbols",
           "formulation": "Formulation", "assumptions": "Assumptions",
           "symbol": "Symbol", "meaning": "Meaning", "method": "Method"},
    "zh": {"title": "模型：{name}", "results": "结果分析", "symbols": "符号说明",
           "formulation": "模型建立", "assumptions": "模型假设",
           "symbol": "符号", "meaning": "含义", "method": "方法"},
}


def model_section_tex(eq: Equations, *, assumptions: list[str],
                      results: list[tuple[str, list[str], list[tuple[str, ...]]]],
                      sentences: list[str], figures: list[tuple[str, str]],
                      lang: str = "en") -> str:
    """A model section for the other estimators' fits (tables, graphs): assumptions, the
    symbol table, the formulation, the figures ``(file, caption)``, and the results tables
    ``(caption, header, rows)`` with the ``sentences`` that read them; nothing else."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    t = _GENERIC[lang]
    doc = ([r"\documentclass[11pt]{ctexart}" if lang == "zh" else r"\documentclass[11pt]{article}"]
           + [r"\usepackage{amsmath,amssymb,graphicx,booktabs}",
              r"\usepackage[margin=2.5cm]{geometry}", r"\begin{document}",
              f"\\section*{{{t['title'].format(name=escape_tex(eq.title))}}}",
              f"\\subsection*{{{t['assumptions']}}}", r"\begin{enumerate}"]
           + [f"  \\item {escape_tex(a)}" for a in assumptions] + [r"\end{enumerate}",
                                                                  f"\\subsection*{{{t['symbols']}}}"])
    doc += _table([(f"${s}$", text_with_math(w)) for s, w in eq.where],
                  [t["symbol"], t["meaning"]], t["symbols"], cols=r"lp{0.68\linewidth}")
    body = eq.to_latex().split("\n")
    doc += [f"\\subsection*{{{t['formulation']}}}"]
    doc += body[body.index(r"\begin{align}"):body.index(r"\end{align}") + 1]
    for file, caption in figures:
        doc += [r"\begin{figure}[!htbp]", r"\centering",
                f"\\includegraphics[width=0.8\\linewidth]{{{file}}}",
                f"\\caption{{{escape_tex(caption)}}}", r"\end{figure}"]
    doc.append(f"\\subsection*{{{t['results']}}}")
    for caption, header, rows in results:
        doc += _table([tuple(escape_tex(c) for c in r) for r in rows],
                      [escape_tex(h) for h in header], escape_tex(caption))
    doc += [escape_tex(s) for s in sentences]
    doc.append(r"\end{document}")
    return "\n".join(doc) + "\n"
