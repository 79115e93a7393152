"""Attention over the features of a table: FT-Transformer-style estimators.

Following Gorishniy et al. (2021), "Revisiting Deep Learning Models for Tabular Data", each
feature becomes a token: a numeric value x_j as ``x_j w_j + b_j``, a categorical value c as
``E_j[c] + b_j``; a learned [CLS] token is appended, a stack of pre-LN Transformer blocks
mixes the tokens, and the prediction reads the [CLS] token's final state. Numeric columns are
mapped through a quantile transform to a standard normal first (as in the paper's
experiments), targets of the regressor are standardized; both are undone on output.

Feature importance is the paper's attention-map importance: the [CLS] token's attention to
each feature, averaged over heads, layers and rows. :meth:`feature_attention` gives the whole
token-to-token map for a heatmap.

Both estimators are scikit-learn estimators (``clone``, ``Pipeline``, ``cross_val_score`` and
``GridSearchCV`` work) and take numpy arrays or pandas DataFrames; a DataFrame's object,
category, string and bool columns are categorical (unseen or missing categories share one
"unknown" embedding).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import QuantileTransformer
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from attnlab.models import io
from attnlab.models._params import FRACTION, POSITIVE_INT, TRAINING, TrainingParams
from attnlab.models.latex import Equations
from attnlab.models.tabular.inputs import (  # noqa: F401
    TableInput,
    infer_task,
    is_categorical,
    task_reason,
)
from attnlab.models.training import (
    TrainConfig,
    resolve_device,
    seeded,
    train,
)
from attnlab.nn.transformer import Encoder, EncoderLayer


class _FTNet(nn.Module):
    """Feature tokenizer + [CLS] + pre-LN encoder + head on [CLS]."""

    def __init__(self, n_num: int, cardinalities: list[int], d: int, n_blocks: int, nhead: int,
                 dropout: float, n_out: int):
        super().__init__()
        n_tokens = n_num + len(cardinalities)
        self.num_weight = nn.Parameter(torch.empty(n_num, d))
        self.cat_embed = nn.Embedding(max(1, sum(cardinalities)), d)
        offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]]).astype(np.int64) \
            if cardinalities else np.zeros(0, dtype=np.int64)
        self.register_buffer("cat_offsets", torch.tensor(offsets, dtype=torch.long))
        self.bias = nn.Parameter(torch.empty(n_tokens, d))
        self.cls = nn.Parameter(torch.empty(d))
        bound = d ** -0.5                                   # the paper's uniform(+-1/sqrt(d))
        for p in (self.num_weight, self.bias, self.cls, self.cat_embed.weight):
            nn.init.uniform_(p, -bound, bound)
        layer = EncoderLayer(d, nhead, 2 * d, dropout, activation="gelu", batch_first=True,
                             norm_first=True)
        self.encoder = Encoder(layer, n_blocks)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, n_out))

    def tokens(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        parts = []
        if x_num.shape[1]:
            parts.append(x_num[..., None] * self.num_weight)            # (B, n_num, d)
        if x_cat.shape[1]:
            parts.append(self.cat_embed(x_cat + self.cat_offsets))       # (B, n_cat, d)
        t = torch.cat(parts, dim=1) + self.bias
        cls = self.cls.expand(t.shape[0], 1, -1)
        return torch.cat([t, cls], dim=1)                                # (B, n_tokens + 1, d)

    def forward(self, x_num, x_cat, return_weights: bool = False):
        h = self.tokens(x_num, x_cat)
        res = self.encoder(h, return_weights=return_weights)
        last = res.last_hidden_state if return_weights else res
        out = self.head(last[:, -1])
        return (out, res.attentions) if return_weights else out


class _FeatureAttentionBase(TableInput, TrainingParams, io.SavedEstimator, BaseEstimator):
    def __init__(self, d_token: int = 32, *, n_blocks: int = 2, nhead: int = 4,
                 dropout: float = 0.1, val_fraction: float = 0.15, max_epochs: int = 200,
                 batch_size: int = 64, lr: float = 1e-3, weight_decay: float = 1e-4,
                 patience: int = 20, clip_norm: float = 1.0, seed: int = 0,
                 device: str = "auto", verbose: bool = False):
        self.d_token = d_token
        self.n_blocks = n_blocks
        self.nhead = nhead
        self.dropout = dropout
        self.val_fraction = val_fraction
        self._keep_training(locals())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

    # ---- parameters and input -----------------------------------------------------------

    _parameter_constraints: dict = {
        "d_token": POSITIVE_INT, "n_blocks": POSITIVE_INT, "nhead": POSITIVE_INT,
        "dropout": FRACTION, "val_fraction": FRACTION, **TRAINING}

    def _check_params(self):
        self._validate_params()
        if self.d_token % self.nhead:
            raise ValueError(f"d_token ({self.d_token}) must be divisible by nhead "
                             f"({self.nhead})")

    def _build(self, n_out: int) -> _FTNet:
        cards = [len(self.categories_[c]) + 1 for c in self.cat_columns_]
        return _FTNet(len(self.num_columns_), cards, self.d_token, self.n_blocks, self.nhead,
                      self.dropout, n_out)

    # ---- fit ----------------------------------------------------------------------------

    def _fit(self, X, y, n_out, targets_fn, loss_fn, stratify: bool):
        self._check_params()
        self.device_ = resolve_device(self.device)
        x_num, x_cat, y = self._fit_input(X, y)
        if len(x_num) < 1:
            raise ValueError("X is empty: at least one row is needed")
        t = targets_fn(y)
        n = len(t)
        idx = np.arange(n)
        n_val = int(round(n * self.val_fraction))
        tr, va = idx, idx[:0]
        if n_val >= 1 and n - n_val >= 1:
            strat = None
            if stratify:
                counts = np.bincount(t.cpu().numpy())
                strat = t.cpu().numpy() if counts[counts > 0].min() >= 2 and n_val >= len(
                    counts[counts > 0]) else None
            tr, va = train_test_split(idx, test_size=n_val, random_state=self.seed,
                                      stratify=strat)
        tr_t = torch.as_tensor(tr, device=self.device_)
        va_t = torch.as_tensor(va, device=self.device_)
        with seeded(self.seed, self.device_):
            self.net_ = self._build(n_out()).to(self.device_)
            self.history_ = train(
                self.net_, loss_fn, (x_num[tr_t], x_cat[tr_t], t[tr_t]),
                (x_num[va_t], x_cat[va_t], t[va_t]) if len(va) else None,
                TrainConfig.of(self), description=type(self).__name__)
        self.feature_importances_ = self._importance(x_num, x_cat)
        return self

    @torch.no_grad()
    def _raw(self, X) -> torch.Tensor:
        check_is_fitted(self, "net_")
        x_num, x_cat = self._input(X)
        self.net_.eval()
        outs = [self.net_(x_num[i:i + 1024], x_cat[i:i + 1024])
                for i in range(0, len(x_num), 1024)]
        return torch.cat(outs).double().cpu()

    # ---- attention ----------------------------------------------------------------------

    @torch.no_grad()
    def _maps(self, x_num, x_cat) -> torch.Tensor:
        """Mean attention over rows, heads and layers, ``(n_tokens + 1, n_tokens + 1)``."""
        self.net_.eval()
        total, n = None, 0
        for i in range(0, len(x_num), 512):
            _, maps = self.net_(x_num[i:i + 512], x_cat[i:i + 512], return_weights=True)
            m = torch.stack(maps).mean(dim=(0, 2)).sum(dim=0)             # (T, T)
            total = m if total is None else total + m
            n += len(x_num[i:i + 512])
        return (total / n).double().cpu()

    def _importance(self, x_num, x_cat) -> np.ndarray:
        cls_row = self._maps(x_num, x_cat)[-1, :-1]                        # [CLS] -> features
        return (cls_row / cls_row.sum()).numpy()

    @property
    def token_names_(self) -> list[str]:
        check_is_fitted(self, "net_")
        return list(self.num_columns_) + list(self.cat_columns_)

    def feature_attention(self, X) -> np.ndarray:
        """Mean attention map over the rows of X, heads and layers, ``(F + 1, F + 1)`` with
        the tokens in :attr:`token_names_` order and [CLS] last; row = the attending token."""
        check_is_fitted(self, "net_")
        x_num, x_cat = self._input(X)
        return self._maps(x_num, x_cat).numpy()

    def attention_importance(self, X) -> np.ndarray:
        """[CLS] attention to each feature, averaged over the rows of X, heads and layers,
        normalized to sum to 1 (``feature_importances_`` is this on the training data)."""
        m = self.feature_attention(X)[-1, :-1]
        return m / m.sum()

    # ---- equations ----------------------------------------------------------------------

    def equations(self) -> Equations:
        check_is_fitted(self, "net_")
        d, L, h = self.d_token, self.n_blocks, self.nhead
        n_num, n_cat = len(self.num_columns_), len(self.cat_columns_)
        T = n_num + n_cat + 1
        n_out = self.net_.head[-1].out_features
        lines = []
        if n_num:
            lines.append((r"\mathbf{t}_j", r"\tilde{x}_j \mathbf{w}_j + \mathbf{b}_j \in "
                          r"\mathbb{R}^{" + str(d) + r"}, \quad \tilde{x}_j = \Phi^{-1}"
                          r"\left(\hat{F}_j(x_j)\right), \quad j = 1, \ldots, " + str(n_num)))
        if n_cat:
            span = (r"j = " + str(n_num + 1) if n_cat == 1 else
                    r"j = " + str(n_num + 1) + r", \ldots, " + str(n_num + n_cat))
            lines.append((r"\mathbf{t}_j", r"\mathbf{E}_j[c_j] + \mathbf{b}_j \in \mathbb{R}^{"
                          + str(d) + r"}, \quad " + span))
        dk = d // h
        lines += [
            (r"\mathbf{T}^{(0)}", r"\left[\mathbf{t}_1; \ldots; \mathbf{t}_{" + str(T - 1)
             + r"}; \mathbf{t}_{\mathrm{CLS}}\right] \in \mathbb{R}^{" + f"{T} \\times {d}" + "}"),
            (r"\mathbf{Q}_i, \mathbf{K}_i, \mathbf{V}_i", r"\mathrm{LN}(\mathbf{T}^{(l-1)}) "
             r"\mathbf{W}^Q_i, \; \mathrm{LN}(\mathbf{T}^{(l-1)}) \mathbf{W}^K_i, \; \mathrm{LN}"
             r"(\mathbf{T}^{(l-1)}) \mathbf{W}^V_i \in \mathbb{R}^{" + f"{T} \\times {dk}" + "}"),
            (r"\mathbf{A}_i", r"\mathrm{softmax}\left(\frac{\mathbf{Q}_i \mathbf{K}_i^\top}"
             r"{\sqrt{" + str(dk) + r"}}\right) \in \mathbb{R}^{" + f"{T} \\times {T}" + "}"),
            (r"\mathbf{U}^{(l)}", r"\mathbf{T}^{(l-1)} + \left[\mathbf{A}_1 \mathbf{V}_1; "
             r"\ldots; \mathbf{A}_{" + str(h) + r"} \mathbf{V}_{" + str(h) + r"}\right] "
             r"\mathbf{W}^O"),
            (r"\mathbf{T}^{(l)}", r"\mathbf{U}^{(l)} + \mathrm{FFN}\left(\mathrm{LN}("
             r"\mathbf{U}^{(l)})\right), \quad l = 1, \ldots, " + str(L)),
            (r"\hat{\mathbf{y}}", self._output_equation(n_out)),
        ]
        where = [(r"\mathrm{FFN}(\mathbf{u})", r"\(\mathbf{W}_2\,\mathrm{GELU}(\mathbf{W}_1 "
                  r"\mathbf{u} + \mathbf{b}_1) + \mathbf{b}_2\), hidden size " + f"{2 * d}"),
                 (r"\hat{F}_j, \Phi", "the empirical CDF of feature j on the training data "
                  "and the standard normal CDF (quantile transform)"),
                 (r"\mathbf{t}_{\mathrm{CLS}}", "a learned token whose final state is read "
                  "out"),
                 (r"x_j, c_j", "the value of numeric feature j, the level of categorical "
                  "feature j"),
                 (r"\mathbf{w}_j, \mathbf{b}_j, \mathbf{E}_j", "the tokenizer's weight and bias "
                  "vectors of feature j, and the embedding table of a categorical feature"),
                 (r"\mathbf{W}^Q_i, \mathbf{W}^K_i, \mathbf{W}^V_i, \mathbf{W}^O",
                  f"the query, key and value projections of head i (of {h}) and the output "
                  "projection; LN is layer normalization"),
                 *self._output_symbols()]
        names = ", ".join(f"{j + 1}: {c}" for j, c in enumerate(self.token_names_))
        where.append((r"j", f"features ({names})"))
        return Equations(f"{type(self).__name__} (FT-Transformer, {L} blocks, {h} heads, "
                         f"d = {d})", lines, where)

    def to_latex(self) -> str:
        """The model's equations with its dimensions, as a LaTeX ``align`` fragment."""
        return self.equations().to_latex()

    def to_markdown(self) -> str:
        """The same equations as Markdown ``$$`` blocks."""
        return self.equations().to_markdown()

    # ---- save / load --------------------------------------------------------------------

    def _extra_state(self) -> dict:
        return {}

    def _saved(self) -> tuple[dict, dict]:
        q = self.quantile_
        tensors = {"feature_importances": torch.tensor(self.feature_importances_)}
        if self.num_columns_:
            tensors["quantile.quantiles"] = torch.tensor(q.quantiles_)
            tensors["quantile.references"] = torch.tensor(q.references_)
        state = {"num_columns": self.num_columns_, "cat_columns": self.cat_columns_,
                 "categories": self.categories_, "from_frame": bool(self.from_frame_),
                 "feature_names_in": None if not hasattr(self, "feature_names_in_")
                 else [str(c) for c in self.feature_names_in_],
                 "n_features_in": int(self.n_features_in_),
                 "n_out": int(self.net_.head[-1].out_features), **self._extra_state()}
        return state, tensors

    def _restore(self, s: dict, tensors: dict):
        self.num_columns_, self.cat_columns_ = list(s["num_columns"]), list(s["cat_columns"])
        self.categories_ = {k: list(v) for k, v in s["categories"].items()}
        self.from_frame_ = bool(s["from_frame"])
        if s["feature_names_in"] is not None:
            self.feature_names_in_ = np.asarray(s["feature_names_in"], dtype=object)
        self.n_features_in_ = int(s["n_features_in"])
        n_out = int(s["n_out"])
        self._load_extra_state(s)
        self.feature_importances_ = tensors["feature_importances"].numpy()
        q = QuantileTransformer(output_distribution="normal")
        if self.num_columns_:
            q.quantiles_ = tensors["quantile.quantiles"].numpy()
            q.references_ = tensors["quantile.references"].numpy()
            q.n_quantiles_ = len(q.references_)
            q.n_features_in_ = q.quantiles_.shape[1]
        self.quantile_ = q
        return lambda: self._build(n_out)

    def _load_extra_state(self, state: dict) -> None:
        pass


class FeatureAttentionClassifier(ClassifierMixin, _FeatureAttentionBase):
    """FT-Transformer classifier (see the module docstring). ``predict_proba`` is the softmax
    of the [CLS] head; ``classes_`` are the sorted labels.

    Example:
        >>> from sklearn.datasets import load_iris
        >>> X, y = load_iris(return_X_y=True, as_frame=True)
        >>> clf = FeatureAttentionClassifier(max_epochs=20).fit(X, y)
        >>> clf.predict_proba(X[:2]).shape, clf.feature_importances_.shape
        ((2, 3), (4,))
    """

    def fit(self, X, y) -> "FeatureAttentionClassifier":
        """Fit on X (array or DataFrame) and class labels y."""
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")

        def targets(y_valid):
            y_valid = column_or_1d(np.asarray(y_valid))
            check_classification_targets(y_valid)
            self.classes_ = np.unique(y_valid)
            if len(self.classes_) < 2:
                raise ValueError(f"y has only one class ({self.classes_[0]!r}); a classifier "
                                 "needs at least 2 classes")
            codes = np.searchsorted(self.classes_, y_valid)
            return torch.as_tensor(codes, dtype=torch.long, device=self.device_)

        def loss_fn(model, xn, xc, t):
            return F.cross_entropy(model(xn, xc), t)

        return self._fit(X, y, lambda: len(self.classes_), targets, loss_fn, stratify=True)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities ``(n, n_classes)`` in ``classes_`` order."""
        return torch.softmax(self._raw(X), dim=-1).numpy()

    def predict(self, X) -> np.ndarray:
        """The predicted class of each row of ``X``."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    def _output_symbols(self) -> list[tuple[str, str]]:
        return [(r"\mathbf{W}_o, \mathbf{b}_o", "the output layer over the classes")]

    def _output_equation(self, n_out: int) -> str:
        return (r"\mathrm{softmax}\left(\mathbf{W}_o \, \mathrm{ReLU}\left(\mathrm{LN}("
                r"\mathbf{T}^{(L)}_{\mathrm{CLS}})\right) + \mathbf{b}_o\right) \in "
                r"\mathbb{R}^{" + str(n_out) + "}")

    def _extra_state(self) -> dict:
        return {"classes": self.classes_.tolist(), "classes_dtype": self.classes_.dtype.str}

    def _load_extra_state(self, state: dict) -> None:
        self.classes_ = np.asarray(state["classes"], dtype=np.dtype(state["classes_dtype"]))


class FeatureAttentionRegressor(RegressorMixin, _FeatureAttentionBase):
    """FT-Transformer regressor (see the module docstring); the target is standardized for
    training and mapped back on output.

    Example:
        >>> from sklearn.datasets import load_diabetes
        >>> X, y = load_diabetes(return_X_y=True, as_frame=True)
        >>> reg = FeatureAttentionRegressor(max_epochs=5).fit(X, y)
        >>> reg.predict(X[:3]).shape
        (3,)
    """

    def fit(self, X, y) -> "FeatureAttentionRegressor":
        """Fit on X (array or DataFrame) and numeric targets y."""
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")

        def targets(y_valid):
            yv = column_or_1d(np.asarray(y_valid, dtype=float))
            if not np.isfinite(yv).all():
                raise ValueError("y has missing or infinite values; drop those rows first")
            self.y_mean_, self.y_std_ = float(yv.mean()), float(yv.std()) or 1.0
            return torch.tensor((yv - self.y_mean_) / self.y_std_, dtype=torch.float32,
                                device=self.device_)

        def loss_fn(model, xn, xc, t):
            return F.mse_loss(model(xn, xc)[:, 0], t)

        return self._fit(X, y, lambda: 1, targets, loss_fn, stratify=False)

    def predict(self, X) -> np.ndarray:
        """The predicted target of each row of ``X``."""
        return self._raw(X)[:, 0].numpy() * self.y_std_ + self.y_mean_

    def _output_symbols(self) -> list[tuple[str, str]]:
        return [(r"\mu_y, \sigma_y", "mean and standard deviation of the training target"),
                (r"\mathbf{w}_o, b_o", "the output layer")]

    def _output_equation(self, n_out: int) -> str:
        return (r"\mu_y + \sigma_y \left(\mathbf{w}_o^\top \, \mathrm{ReLU}\left(\mathrm{LN}("
                r"\mathbf{T}^{(L)}_{\mathrm{CLS}})\right) + b_o\right)")

    def _extra_state(self) -> dict:
        return {"y_mean": self.y_mean_, "y_std": self.y_std_}

    def _load_extra_state(self, state: dict) -> None:
        self.y_mean_, self.y_std_ = float(state["y_mean"]), float(state["y_std"])
