"""One attention network across many series, each with its own statistical base.

:class:`GlobalForecaster` keeps the hybrid of :class:`~attnlab.models.forecast.AttentionForecaster`
(the statistical base of each series, plus an attention network's correction weighted by a
``w`` set on held-out windows) but trains the network once, on windows from every series of a
frequency: the arrangement of Smyl's ES-RNN, which won the M4 competition (Smyl 2020), where
exponential smoothing is fitted per series and one recurrent network across all of them.

Per series ``i`` with seasonal-naive scale ``s_i`` (the in-sample mean absolute seasonal
difference, MASE's denominator), a window ending at ``T`` gives the network

* the last ``L`` values relative to the last one, ``(y_t - y_T) / s_i``;
* the base's ``H``-step forecast from ``T``, relative to ``y_T`` and scaled by ``s_i`` (it enters
  beside the pooled state, as known-future covariates do);

and the network predicts ``(y_{T+h} - base_{T+h}) / s_i``. The output layer starts at zero, so an
untrained network forecasts the bases.

Held out: the last window (``H`` observations) of a share ``holdout`` of the series, drawn
with ``seed``, with their bases refitted on the observations before it (as at forecast time);
half of them stop the training, the other half set ``w`` and calibrate the intervals. Every
other window of every series trains the network (a held-out series' windows end before its
held-out one), so a series of lookback + horizon observations still teaches it.
Intervals are split conformal, pooled across series in each series' scale: for level q and
step h, the ceil((n + 1) q)-th smallest ``|error| / s_i`` over the n calibration windows,
times ``s_i``. A calibration series holds out one window when there are at least 20 of them
(a 95% bound needs 19 errors); a smaller panel's calibration series each hold out their last
ceil(20 / series) windows (as many as fit), each forecast by a base fitted before it. Only
where it is needed: on M1's quarterly series (30 calibration series) two windows each made
the intervals narrower than the test period's errors (80% coverage 75.1% -> 68.6%), earlier
windows being easier to forecast than the last. Per-series calibration would need many
held-out windows per series, which short series (M3's yearly ones have 14 observations) do
not have; pooling assumes the series' scaled errors are exchangeable (and a series' successive
windows roughly so).

A series shorter than one window (lookback + horizon) gets its base's forecast, and one line
in ``notes_`` says which series.

Input: a list of 1-D series, a dict ``{id: series}``, or a long data frame with columns
``unique_id``, ``ds`` and ``y`` (statsforecast's and NeuralForecast's convention). ``predict()``
returns a long data frame: ``unique_id``, ``ds`` (dates when the input had them, else the step
after the series' end), ``forecast`` and the interval bounds.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator

from attnlab.models._params import (
    FLAG,
    FRACTION,
    OPTIONAL_POSITIVE_INT,
    POSITIVE_INT,
    TRAINING,
    TrainingParams,
    one_of,
)
from attnlab.models.forecast.bases import BASES, DEFAULT, FALLBACKS, fit_first
from attnlab.models.forecast.intervals import conformal_widths
from attnlab.models.forecast.nets import RecurrentNet, TransformerNet
from attnlab.models.forecast.panel import (
    as_panel,
    plain_dates,
    restore_dates,
    series_scale,
)
from attnlab.models.forecast.panel_forecasts import PanelForecasts
from attnlab.models.forecast.shrink import gain_significance
from attnlab.models.forecast.windows import WindowSettings
from attnlab.models.io import SavedEstimator
from attnlab.models.training import TrainConfig, resolve_device, seeded, train

LEVELS = (0.8, 0.95)
#: the calibration errors aimed at: with fewer calibration series than this, each holds out
#: its last ceil(20 / series) windows (as many as it has), so that a 95% bound (19 errors at
#: least) exists on a panel of a dozen long series
CALIBRATION_WINDOWS = 20


class GlobalForecaster(PanelForecasts, WindowSettings, TrainingParams, SavedEstimator,
                       BaseEstimator):
    """One attention network over many series, each series' statistical base kept.

    Args:
        horizon: steps forecast at once, for every series.
        season: the seasonal period shared by the series (12 for monthly), or None.
        lookback: past steps the network reads (default: two seasons, at least the horizon).
        base: each series' statistical base, a name of
            :data:`~attnlab.models.forecast.bases.BASES`: ``"combination"`` (the median of
            ETS, ARIMA and Theta) by default, as for one series; ``"theta"`` is faster.
        encoder, hidden_size, num_layers, nhead, dropout, pool: the network, as in
            :class:`~attnlab.models.forecast.AttentionForecaster`.
        max_epochs, batch_size, lr, weight_decay, patience, clip_norm, seed, device, verbose:
            the shared training loop.
        holdout: the share of series whose last window is held out: half of them stop the
            training, half set ``w`` and the intervals.
        n_jobs: processes fitting the bases (joblib; None is one).
        network: False trains no network: every series gets its base's forecast, with
            intervals from the bases' errors on the calibration windows.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> Y = [10 + np.sin(np.arange(60) * np.pi / 6) + rng.normal(0, .1, 60) for _ in range(8)]
        >>> f = GlobalForecaster(6, season=12, max_epochs=2).fit(Y)
        >>> f.predict().shape
        (48, 7)
    """

    def __init__(self, horizon: int = 12, *, season: int | None = None,
                 lookback: int | None = None, base: str = DEFAULT, encoder: str = "gru",
                 hidden_size: int = 32, num_layers: int = 1, nhead: int = 4,
                 dropout: float = 0.1, pool: str = "attention", max_epochs: int = 60,
                 batch_size: int = 256, lr: float = 2e-3, weight_decay: float = 1e-4,
                 patience: int = 8, clip_norm: float = 1.0, seed: int = 0,
                 device: str = "auto", verbose: bool = False, holdout: float = 0.3,
                 n_jobs: int | None = None, network: bool = True):
        self.horizon = horizon
        self.season = season
        self.lookback = lookback
        self.base = base
        self.encoder = encoder
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.nhead = nhead
        self.dropout = dropout
        self.pool = pool
        self.holdout = holdout
        self.n_jobs = n_jobs
        self.network = network
        self._keep_training(locals())

    # ---- configuration ------------------------------------------------------------------

    @property
    def effective_lookback(self) -> int:
        """``lookback``, or two seasons and at least the horizon (shorter than the
        single-series default: competition series are short)."""
        if self.lookback is not None:
            return int(self.lookback)
        return max(2 * self.effective_season, int(self.horizon))

    @property
    def min_length(self) -> int:
        """The shortest series the network takes part in: one window, lookback + horizon
        (a shorter one gets its base's forecast)."""
        return self.effective_lookback + int(self.horizon)

    # base: one fixed method for every series (auto's per-series search is
    # AttentionForecaster's)
    _parameter_constraints: dict = {
        "horizon": POSITIVE_INT, "season": OPTIONAL_POSITIVE_INT,
        "lookback": OPTIONAL_POSITIVE_INT, "base": one_of(*BASES),
        "encoder": one_of("gru", "lstm", "transformer"), "hidden_size": POSITIVE_INT,
        "num_layers": POSITIVE_INT, "nhead": POSITIVE_INT, "dropout": FRACTION,
        "pool": one_of("attention", "mean"), "holdout": FRACTION,
        "n_jobs": [int, None], "network": FLAG, **TRAINING}

    def _check_params(self) -> None:
        self._validate_params()
        if self.encoder == "transformer" and self.hidden_size % self.nhead:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by nhead "
                             f"({self.nhead}) for the transformer encoder")

    def _build(self) -> torch.nn.Module:
        H = self.horizon
        if self.encoder == "transformer":
            return TransformerNet(1, self.hidden_size, self.num_layers, self.nhead, H,
                                  self.dropout, self.effective_lookback, self.pool, H)
        return RecurrentNet(1, self.hidden_size, self.num_layers, self.encoder, H,
                            self.dropout, self.pool, H)

    # ---- windows ------------------------------------------------------------------------

    def _windows(self, i: int, ends: np.ndarray, base=None) -> tuple[np.ndarray, np.ndarray]:
        """Series ``i``'s inputs and base forecasts (both scaled) for windows ending before
        each index of ``ends``: ``(W, L, 1)``, ``(W, H)``, and the raw base forecasts
        (``base``: another fit of the series' base)."""
        y, s, L = self.series_[i], self.scales_[i], self.effective_lookback
        idx = ends[:, None] - L + np.arange(L)[None, :]
        last = y[ends - 1][:, None]
        x = ((y[idx] - last) / s)[..., None]
        ref = (base or self.bases_[i]).forecasts(y, ends, self.horizon)
        return x, (ref - last) / s, ref

    # ---- fit / predict ------------------------------------------------------------------

    def fit(self, Y) -> "GlobalForecaster":
        """Fit every series' base, then one network on windows from all of them."""
        self._check_params()
        self.ids_, self.series_, self.dates_ = as_panel(Y)
        H, L, m = self.horizon, self.effective_lookback, self.effective_season
        base_notes = self._fit_bases()
        self.scales_ = np.array([series_scale(y, m) for y in self.series_])
        lengths = np.array([len(y) for y in self.series_])
        # a series with a held-out window (L before it, H in it) takes part in the network
        self.in_network_ = lengths >= self.min_length
        short = [self.ids_[i] for i in np.flatnonzero(~self.in_network_)]
        self.notes_ = base_notes
        if short:
            shown = ", ".join(map(str, short[:10])) + (", ..." if len(short) > 10 else "")
            self.notes_.append(f"{len(short)} series shorter than lookback {L} + horizon {H} "
                               f"get their base's forecast alone: {shown}")
        rng = np.random.default_rng(self.seed)
        parts = {"train": [], "stop": [], "cal": []}
        members = rng.permutation(np.flatnonzero(self.in_network_))
        k = int(round(self.holdout * len(members)))
        calibrate, stop = set(members[: k // 2].tolist()), set(members[k // 2: k].tolist())
        # few calibration series: each holds out its last few windows, so that the 95% bound
        # rests on CALIBRATION_WINDOWS errors rather than on fewer than it needs
        per = -(-CALIBRATION_WINDOWS // len(calibrate)) if calibrate else 1
        for i in np.sort(members):
            n = lengths[i]
            # every held-out window keeps a lookback of observations before it
            r = max(1, min(per, (n - L) // H)) if i in calibrate else int(i in stop)
            held_ends = n - H * np.arange(1, r + 1)
            # a held-out series' last windows are unseen: its training windows end before them
            last = (held_ends.min() if r else n) - H
            ends = np.arange(max(L, self.bases_[i].history), last + 1)
            if len(ends):
                parts["train"].append((i, ends, None))
            for end in held_ends:
                # the held-out window's base is fitted without it, as at forecast time: errors
                # of a base fitted on the window itself would make the intervals too narrow
                before, _ = fit_first([self.base_names_[i]], self.series_[i][:end], m)
                parts["cal" if i in calibrate else "stop"].append((i, np.array([end]), before))
        data = {k: self._tensors(v) for k, v in parts.items()}
        cal_series = torch.tensor([i for i, _, _ in parts["cal"]], dtype=torch.long)
        self.device_ = resolve_device(self.device)
        config = TrainConfig.of(self)
        with seeded(self.seed, self.device_):
            self.net_ = self._build().to(self.device_)
            if data["train"] is not None and self.network:
                stop = data["stop"] if data["stop"] is not None else data["cal"]
                self.history_ = train(self.net_, self._loss, data["train"], stop, config,
                                      description="global forecaster")
            else:
                from attnlab.models.training import TrainHistory

                self.history_ = TrainHistory()
                if not self.network:
                    self.notes_.append("network=False: the forecasts are the bases'")
                else:
                    self.notes_.append("no series is long enough for a training window "
                                       f"(lookback {L} + 2 x horizon {H}): the forecasts are "
                                       "the bases'")
        self.shrink_ = self._shrink(data["cal"], cal_series)
        self.network_in_use_ = self.shrink_ > 0
        self.interval_widths_, self.n_calibration_ = self._calibrate(data["cal"])
        for key, widths in self.interval_widths_.items():
            q = float(key)
            if not np.isfinite(np.asarray(widths)).any():
                need = int(np.ceil(q / (1 - q) - 1e-9))
                self.notes_.append(
                    f"the {q:.0%} interval is unbounded (-inf, inf): {self.n_calibration_} "
                    f"held-out windows of {len(calibrate)} series calibrate it and a {q:.0%} "
                    f"bound needs at least {need}; give more or longer series, or a larger "
                    "holdout (--val-fraction on the command line)")
        return self

    def _fit_bases(self) -> list[str]:
        """``bases_``: each series' base (the next of :data:`FALLBACKS` where it cannot be
        fitted); returns one note on the series that fell back."""
        from joblib import Parallel, delayed

        m = self.effective_season
        if self.n_jobs in (None, 1):
            fitted = [fit_first([self.base], y, m) for y in self.series_]
        else:
            fitted = Parallel(n_jobs=self.n_jobs)(
                delayed(fit_first)([self.base], y, m) for y in self.series_)
        self.bases_ = [b for b, _ in fitted]
        self.base_names_ = [b.name for b in self.bases_]
        dropped = [(self.ids_[i], notes) for i, (_, notes) in enumerate(fitted) if notes]
        if not dropped:
            return []
        uid, why = dropped[0]
        return [f"{len(dropped)} series could not take the {self.base} base and took the next "
                f"of {', '.join(FALLBACKS)} (first: {uid!r}: {'; '.join(why)})"]

    def _tensors(self, parts):
        """Stacked inputs, scaled base forecasts and targets of the windows in ``parts``."""
        if not parts:
            return None
        xs, fs, ts = [], [], []
        for i, ends, base in parts:
            x, f, ref = self._windows(i, ends, base)
            y = self.series_[i]
            target = (y[ends[:, None] + np.arange(self.horizon)[None, :]] - ref) / self.scales_[i]
            xs.append(x)
            fs.append(f)
            ts.append(target)
        dev = resolve_device(self.device)
        return tuple(torch.tensor(np.concatenate(a), dtype=torch.float32, device=dev)
                     for a in (xs, fs, ts))

    @staticmethod
    def _loss(model, x, f, t):
        return F.l1_loss(model(x, f)[0], t)

    @torch.no_grad()
    def _shrink(self, cal, series) -> float:
        """The ``w`` in [0, 1] minimizing the calibration windows' absolute error of
        ``base + w * correction`` (grid search), shrunk by its sampling error
        (:func:`~attnlab.models.forecast.shrink.gain_significance`, each calibration series
        one observation), folded into the output layer."""
        if cal is None or not self.history_.epochs:
            return 0.0 if not self.history_.epochs else 1.0
        self.net_.eval()
        out = self.net_(cal[0], cal[1])[0].double().cpu()
        t = cal[2].double().cpu()
        grid = torch.linspace(0, 1, 21, dtype=torch.float64)
        errs = torch.stack([(t - w * out).abs().mean() for w in grid])
        w = float(grid[int(torch.argmin(errs))])
        w *= gain_significance(out, t, w, series)
        last = self.net_.pool.head[-1]
        last.weight.mul_(w)
        last.bias.mul_(w)
        return w

    @torch.no_grad()
    def _calibrate(self, cal) -> tuple[dict[str, list[float]], int]:
        """Pooled split-conformal half-widths per step, in units of each series' scale."""
        H = self.horizon
        if cal is None:
            return {f"{q:g}": [float("inf")] * H for q in LEVELS}, 0
        self.net_.eval()
        err = (self.net_(cal[0], cal[1])[0] - cal[2]).abs().double().cpu().numpy()
        return conformal_widths(err, H, LEVELS), len(err)

    def equations(self):
        """The model's equations and symbol table (:class:`~attnlab.models.latex.Equations`)."""
        from attnlab.models.forecast.equations import global_equations

        return global_equations(self)

    def to_latex(self) -> str:
        """The model's equations with its dimensions, as a LaTeX ``align`` fragment."""
        return self.equations().to_latex()

    def _saved(self) -> tuple[dict, dict]:
        tensors = {"values": torch.tensor(np.concatenate(self.series_), dtype=torch.float64),
                   "lengths": torch.tensor([len(y) for y in self.series_], dtype=torch.int64),
                   "scales": torch.tensor(self.scales_, dtype=torch.float64)}
        ids = [i if isinstance(i, (int, str)) else str(i) for i in self.ids_]
        state = {"ids": ids, "bases": [b.to_dict() for b in self.bases_],
                 "dates": [plain_dates(d) for d in self.dates_],
                 "in_network": [bool(v) for v in self.in_network_],
                 "shrink": self.shrink_, "interval_widths": self.interval_widths_,
                 "n_calibration": self.n_calibration_, "notes": self.notes_}
        return state, tensors

    def _restore(self, state: dict, tensors: dict):
        from attnlab.models.forecast.bases import base_from_dict

        values = tensors["values"].numpy()
        cuts = np.cumsum(tensors["lengths"].numpy())[:-1]
        self.series_ = np.split(values, cuts)
        self.scales_ = tensors["scales"].numpy()
        self.ids_ = list(state["ids"])
        self.bases_ = [base_from_dict(b) for b in state["bases"]]
        self.base_names_ = [b.name for b in self.bases_]
        self.dates_ = [restore_dates(d) for d in state["dates"]]
        self.in_network_ = np.array(state["in_network"], dtype=bool)
        self.shrink_ = float(state["shrink"])
        self.network_in_use_ = self.shrink_ > 0
        self.interval_widths_ = state["interval_widths"]
        self.n_calibration_ = int(state["n_calibration"])
        self.notes_ = list(state["notes"])
        return self._build
