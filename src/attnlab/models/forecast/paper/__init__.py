"""The model section of a paper, written from a fitted forecaster and what was measured.

:func:`paper_tex` returns a LaTeX document (``article`` for English, compiled with pdflatex;
``ctexart`` for Chinese, compiled with xelatex) with the sections judges of modelling
competitions (CUMCM, MCM/ICM) look for: which model forecasts, motivation, assumptions, a symbol
table, the formulation with the model's real dimensions, the architecture figure, the attention
of typical cases with a sentence on each, the comparison with the baselines and its test, the
ablation and the sensitivity analysis. It is written on a single-series
:class:`~attnlab.models.forecast.AttentionForecaster` and its rolling-origin backtest, or on a
:class:`~attnlab.models.forecast.GlobalForecaster` and its held-out panel
(:func:`~attnlab.models.forecast.evaluation.holdout_panel`).

The numbers are measured once (:mod:`.context`); each language's words are a template
(``templates/en.tex``, ``templates/zh.tex``; :mod:`.text`) whose named pieces the document
(:mod:`.document`) fills. Every number comes from the fitted model or from a measurement passed
in; a section whose measurement was not run is left out, never filled with a claim; a difference
is claimed only with a test. :func:`undefined_symbols` checks that every symbol the equations
use is defined. Figures are drawn by the caller (``attnlab paper`` draws them with
:mod:`attnlab.plots.paper`) and passed by file name.
"""

from attnlab.models.forecast.paper.context import PaperInputs, context, pooling_verdict
from attnlab.models.forecast.paper.document import _symbol_rows, method_name, paper_tex
from attnlab.models.forecast.paper.generic import model_section_tex
from attnlab.models.forecast.paper.symbols import undefined_symbols
from attnlab.models.forecast.paper.text import LANGS, fill, pieces, word

__all__ = ["LANGS", "PaperInputs", "context", "fill", "method_name", "model_section_tex",
           "paper_tex", "pieces", "pooling_verdict", "undefined_symbols", "word",
           "_symbol_rows"]
