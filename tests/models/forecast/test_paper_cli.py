"""attnlab paper end to end: the folder it writes from the command line (slow tier: make check)."""

import shutil
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_the_paper_command_writes_the_folder(tmp_path, capsys):
    # over 5 s: the only end-to-end run of `attnlab paper` (backtest, ablation, sensitivity,
    # figures); the text itself is tested on shared fixtures
    from attnlab.cli import main

    assert main(["paper", "--example", "unemployment", "--quick", "--no-compile",
                 "--out", str(tmp_path / "p")]) == 0
    names = {p.name for p in (tmp_path / "p").iterdir()}
    assert {"paper.tex", "architecture.pdf", "attention.pdf", "backtest.pdf"} <= names
    # a --quick paper says on every page that its numbers are preliminary
    tex = (tmp_path / "p" / "paper.tex").read_text()
    assert r"\pagestyle{fancy}" in tex and "DRAFT: a quick run (15 epochs, 2 seeds)" in tex
    tex = (tmp_path / "p" / "paper.tex").read_text()
    assert r"\subsubsection*{Ablation}" in tex and "Sensitivity" in tex
    assert main(["paper", "--example", "co2", "--lang", "fr"]) == 2
    assert "--lang must be one of en, zh" in capsys.readouterr().err


def test_table_and_graph_fits_write_a_paper_section_that_compiles(tmp_path):
    import pandas as pd

    from attnlab.cli import jobs
    from attnlab.models.graph.data import karate

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=80), "b_col": rng.normal(size=80)})
    y = pd.Series((X["a"] + 0.3 * rng.normal(size=80) > 0).astype(int))
    jobs.fit_tabular(X, y, tmp_path / "t", folds=3, max_epochs=3, d_token=8, nhead=2)
    g = karate()
    jobs.fit_graph(g, tmp_path / "g", max_epochs=5)
    for sub, needle in (("t", "cross-validation"), ("g", "Accuracy on held-out")):
        tex = (tmp_path / sub / "paper" / "paper.tex").read_text()
        assert needle in tex and r"\begin{align}" in tex
        assert sub == "g" or "b\\_col" in tex                     # column names escaped
        assert shutil.which("pdflatex"), "pdflatex is not installed (see .ci/run)"
        res = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                              "paper.tex"], cwd=tmp_path / sub / "paper",
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-1500:]
