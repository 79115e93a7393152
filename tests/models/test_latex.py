"""Equations: every piece of math parses (matplotlib's mathtext parser), environments balance,
and user text is escaped."""

import re

import numpy as np
import pandas as pd
from matplotlib.mathtext import MathTextParser

from attnlab.models.latex import Equations, escape_tex

_PARSER = MathTextParser("path")


def assert_parses(eq: Equations):
    for piece in eq.math():
        _PARSER.parse(f"${piece}$")                        # raises ValueError on bad syntax
    tex = eq.to_latex()
    assert tex.count(r"\begin{align}") == tex.count(r"\end{align}") == 1
    assert tex.count(r"\begin{itemize}") == tex.count(r"\end{itemize}")
    body = re.sub(r"\\[{}]", "", tex)                       # escaped braces do not nest
    depth = 0
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0
    # $ pairs in the "where" list
    assert all(line.count("$") % 2 == 0 for line in tex.splitlines() if not line.startswith("%"))
    md = eq.to_markdown()
    assert md.count("$$") == 2 * len(eq.lines)


def test_escape_tex():
    assert escape_tex("a_b 50% & #1 {x} ~ ^ \\") == \
        r"a\_b 50\% \& \#1 \{x\} \~{} \^{} \textbackslash{}"


def test_forecaster_equations_parse(tmp_path):
    from attnlab.models import AttentionForecaster

    t = np.arange(120)
    y = np.sin(2 * np.pi * t / 12) + 0.02 * t
    X = np.c_[np.cos(t / 5)]
    for enc in ("gru", "transformer"):
        f = AttentionForecaster(horizon=4, season=12, encoder=enc, hidden_size=8, nhead=2,
                                max_epochs=1).fit(y, X)
        eq = f.equations()
        assert_parses(eq)
        tex = f.to_latex()
        assert r"\mathbb{R}^{36 \times 8}" in tex or r"\mathbb{R}^{8}" in tex
        assert "t = 1, \\ldots, 36" in tex or "Encoder" in tex
        assert r"\sqrt{8}" in tex and "h = 1, \\ldots, 4" in tex
        assert r"\mathbf{z}_t" in tex                       # the exogenous column


def test_tabular_equations_parse_and_escape_column_names():
    from attnlab.models import FeatureAttentionClassifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"income_k": rng.normal(size=60), "rate %": rng.normal(size=60),
                      "city": rng.choice(["a", "b"], size=60)})
    y = (X["income_k"] > 0).astype(int)
    clf = FeatureAttentionClassifier(d_token=8, nhead=2, n_blocks=1, max_epochs=1).fit(X, y)
    eq = clf.equations()
    assert_parses(eq)
    tex = clf.to_latex()
    assert r"income\_k" in tex and r"rate \%" in tex
    assert r"\mathbb{R}^{4 \times 8}" in tex                 # 3 feature tokens + [CLS], d = 8
    assert r"\sqrt{4}" in tex                                # d_k = 8 / 2 heads
    assert r"\mathbb{R}^{2}" in tex                          # two classes
