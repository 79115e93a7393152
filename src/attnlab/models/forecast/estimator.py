"""Time-series forecasting with attention pooling over past time steps.

:class:`AttentionForecaster` reads a window of the last ``lookback`` observations and predicts
the next ``horizon`` values at once (direct multi-step). Two encoders:

* ``"gru"`` / ``"lstm"``: a recurrent encoder gives hidden states h_1..h_L; the last one asks the
  question (query ``W_q h_L``), every step answers (keys ``W_k h_t``, values ``h_t``), and the
  scaled dot-product weights over the L steps say which past observations the forecast used
  (the attention-pooling of Bahdanau et al. 2015 / Luong et al. 2015 applied over time).
* ``"transformer"``: a pre-LN Transformer encoder over the window (sinusoidal positions), then
  the same attention pooling with the last step's state as the query.

The network predicts the *change from a statistical base forecast* (``base``: seasonal naive,
Holt-Winters ETS, AutoReg, or by default the best of them on the last part of the training
series; :mod:`~attnlab.models.forecast.bases`), and its output layer starts at zero: an
untrained model is its base, and training moves away from it only as far as the validation
windows support (the hybrid of Smyl's ES-RNN, the M4 winner). Scaling is inside: each input
window is expressed relative to its last observation (so a trend does not leave the range seen
in training), divided by the spread of the training targets, and also given in absolute
standardized form; exogenous columns are standardized; with a ``season`` the
phase within the season is given as sin/cos. Exogenous columns are *past covariates*: the
forecast at time T uses their values up to T, so predicting needs no future values of them.

The rolling-origin :meth:`AttentionForecaster.backtest` fits once on the data before the first
origin (or, with ``refit=True``, at every origin) and forecasts from each origin with the
history up to it, next to seasonal naive and statsmodels ETS and AutoReg refitted at every
origin; errors are MAE, RMSE, MAPE and MASE.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from attnlab.models import io
from attnlab.models._params import (
    FLAG,
    FRACTION,
    OPTIONAL_POSITIVE_INT,
    POSITIVE_INT,
    TRAINING,
    TrainingParams,
    one_of,
)
from attnlab.models.forecast.backtest import BacktestResult, rolling_origin
from attnlab.models.forecast.bases import (
    DEFAULT,
    NAMES,
    base_from_dict,
    choose_base,
    fit_base,
    fit_first,
)
from attnlab.models.forecast.equations import forecaster_equations
from attnlab.models.forecast.inputs import (
    as_exog,
    as_series,
    calendar_of,
    future_rows,
    plain,
    steps_between,
)
from attnlab.models.forecast.intervals import ConformalIntervals, conformal_widths
from attnlab.models.forecast.nets import RecurrentNet, TransformerNet
from attnlab.models.forecast.shrink import correction_weight
from attnlab.models.forecast.windows import WindowSettings
from attnlab.models.latex import Equations
from attnlab.models.training import (
    TrainConfig,
    TrainHistory,
    resolve_device,
    seeded,
    train,
)

ENCODERS = ("gru", "lstm", "transformer")
MIN_OBSERVATIONS = 2
CALIBRATION_NEED = 19           # held-out windows a finite 95% split-conformal bound needs
# bases with fitted parameters and states, refitted on a history given to predict
REFITTED = ("ets", "ar", "arima", "theta", "combination")


class AttentionForecaster(WindowSettings, ConformalIntervals, TrainingParams, io.SavedEstimator,
                          BaseEstimator):
    """Multi-step forecaster with attention over past time steps.

    Args:
        horizon: steps predicted at once.
        lookback: past steps the model reads (default: ``3 * season`` if a season is given,
            else 24).
        encoder: ``"gru"``, ``"lstm"`` or ``"transformer"``.
        hidden_size, num_layers, nhead, dropout: the encoder's size (``nhead`` for the
            transformer only; ``hidden_size`` must be divisible by it).
        season: the seasonal period (12 for monthly data); adds the phase as a feature and
            sets seasonal naive's and MASE's period. None for none.
        base: the statistical forecast the network corrects (:mod:`~attnlab.models.forecast.bases`):
            ``"combination"`` (the default: the median of ETS, ARIMA and Theta),
            ``"seasonal_naive"``, ``"naive"``, ``"drift"``, ``"ets"``, ``"ar"``, ``"arima"``,
            ``"theta"``, ``"auto"`` (the lowest error over rolling origins at the end of the
            training series among seasonal naive, drift, ETS, ARIMA, Theta and the
            combination), or ``"none"`` (no base: the network predicts the series' deviation
            from its mean). The output layer starts at zero, so an untrained model forecasts
            the base.
        pool: ``"attention"`` over the encoder's time steps, or ``"mean"`` (uniform weights:
            the ablation that asks whether attention is what helps).
        val_fraction: the last part of the training windows held out: its first half stops
            the training, its second sets ``w`` and the conformal intervals (a larger
            fraction gives more calibration windows, so finite 95% intervals on shorter
            series).
        network: False fits no network: the forecast is the base's alone, with intervals
            from the base's errors (what ``attnlab fit forecast`` uses when a baseline beats
            the model on the backtest).
        max_epochs, batch_size, lr, weight_decay, patience, clip_norm, seed, device, verbose:
            the shared training loop (:class:`~attnlab.models.training.TrainConfig`).

    Example:
        >>> t = np.arange(200)
        >>> y = np.sin(2 * np.pi * t / 12) + 0.01 * t
        >>> f = AttentionForecaster(horizon=6, season=12, max_epochs=5).fit(y)
        >>> f.predict().shape, f.attention_.shape
        ((6,), (36,))
    """

    def __init__(self, horizon: int = 12, *, lookback: int | None = None, encoder: str = "gru",
                 hidden_size: int = 32, num_layers: int = 1, nhead: int = 4,
                 dropout: float = 0.1, season: int | None = None, base: str = DEFAULT,
                 pool: str = "attention", val_fraction: float = 0.2, network: bool = True,
                 max_epochs: int = 300, batch_size: int = 32, lr: float = 1e-3,
                 weight_decay: float = 1e-4, patience: int = 30, clip_norm: float = 1.0,
                 seed: int = 0, device: str = "auto", verbose: bool = False):
        self.horizon = horizon
        self.lookback = lookback
        self.encoder = encoder
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.nhead = nhead
        self.dropout = dropout
        self.season = season
        self.base = base
        self.pool = pool
        self.val_fraction = val_fraction
        self.network = network
        self._keep_training(locals())

    # ---- configuration ------------------------------------------------------------------

    _parameter_constraints: dict = {
        "horizon": POSITIVE_INT, "lookback": OPTIONAL_POSITIVE_INT, "encoder": one_of(*ENCODERS),
        "hidden_size": POSITIVE_INT, "num_layers": POSITIVE_INT, "nhead": POSITIVE_INT,
        "dropout": FRACTION, "season": OPTIONAL_POSITIVE_INT, "base": one_of(*NAMES),
        "pool": one_of("attention", "mean"), "val_fraction": FRACTION,
        "network": FLAG, **TRAINING}

    def _check_params(self) -> None:
        self._validate_params()
        if self.encoder == "transformer" and self.hidden_size % self.nhead:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by nhead "
                             f"({self.nhead}) for the transformer encoder")

    def _build(self, n_features: int) -> nn.Module:
        n_future = self.horizon * getattr(self, "n_future_", 0)
        if self.encoder == "transformer":
            return TransformerNet(n_features, self.hidden_size, self.num_layers, self.nhead,
                                   self.horizon, self.dropout, self.effective_lookback,
                                   self.pool, n_future)
        return RecurrentNet(n_features, self.hidden_size, self.num_layers, self.encoder,
                             self.horizon, self.dropout, self.pool, n_future)

    def _future(self, Xf: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The known-future block of each window: the H rows of ``Xf`` from each start,
        standardized and flattened, ``(len(starts), H * q)``."""
        idx = starts[:, None] + np.arange(self.horizon)[None, :]
        return ((Xf[idx] - self.xf_mean_) / self.xf_std_).reshape(len(starts), -1)

    # ---- features -----------------------------------------------------------------------

    def _features(self, y: np.ndarray, X: np.ndarray | None, ends: np.ndarray,
                  offset: int = 0) -> np.ndarray:
        """Input windows ending just before each index in ``ends``: ``(len(ends), L, F)``.
        ``offset`` is the position of ``y[0]`` in the fitted series (for the seasonal phase)."""
        L = self.effective_lookback
        idx = ends[:, None] - L + np.arange(L)[None, :]                   # (W, L)
        win = y[idx]                                                        # (W, L)
        level = win[:, -1:]
        parts = [(win - level) / self.dscale_, (win - self.mean_) / self.std_]
        feats = [p[..., None] for p in parts]
        if X is not None:
            feats.append((X[idx] - self.x_mean_) / self.x_std_)             # (W, L, p)
        if self.effective_season > 1:
            m = self.effective_season
            phase = 2 * np.pi * ((idx + offset) % m) / m
            feats += [np.sin(phase)[..., None], np.cos(phase)[..., None]]
        return np.concatenate(feats, axis=-1)

    def _reference(self, y: np.ndarray, ends: np.ndarray, state=None, base=None) -> np.ndarray:
        """The base's forecast from each end, ``(len(ends), horizon)``, its parameters fixed
        (``state``: its filter state just before ``y[0]``; ``base``: another fit of it): the
        network predicts the change from it."""
        return (base or self.base_).forecasts(y, ends, self.horizon, state)

    def _targets(self, y: np.ndarray, ends: np.ndarray) -> np.ndarray:
        idx = ends[:, None] + np.arange(self.horizon)[None, :]
        return (y[idx] - self._reference(y, ends)) / self.dscale_

    @property
    def _history(self) -> int:
        """Observations one forecast needs: the window, one season, and the base's lags."""
        own = getattr(self, "base_", None)
        if getattr(self, "base_only_", False):
            return own.history
        return max(self.effective_lookback, self.effective_season,
                   own.history if own is not None else 1)

    # ---- fit / predict ------------------------------------------------------------------

    def fit(self, y, X=None, X_future=None) -> "AttentionForecaster":
        """Fit on the series ``y`` (1-D array, list or pandas Series), optional past
        covariates ``X`` and optional known-future covariates ``X_future`` (one row per
        observation each). Past covariates enter with the window (values up to the origin);
        known-future ones (calendar, planned promotions, set prices) with the H steps being
        forecast, so :meth:`predict` then needs their values for those steps."""
        self._check_params()
        self.calendar_ = calendar_of(y)
        y = as_series(y)
        X = as_exog(X, len(y))
        Xf = as_exog(X_future, len(y), "X_future")
        self.n_future_ = 0 if Xf is None else Xf.shape[1]
        if Xf is not None:
            self.xf_mean_ = Xf.mean(axis=0)
            self.xf_std_ = np.where(Xf.std(axis=0) > 0, Xf.std(axis=0), 1.0)
        L, H = self.effective_lookback, self.horizon
        if len(y) < MIN_OBSERVATIONS:
            raise ValueError(f"y has {len(y)} observation(s); a forecast needs at least "
                             f"{MIN_OBSERVATIONS} (the drift base's first and last value)")
        self.notes_ = []
        self.base_only_ = False
        need = self.min_length
        self.base_only_ = len(y) < need or not self.network
        if not self.network:
            self.notes_.append("network=False: the forecast is the base's alone")
        elif self.base_only_:
            self.notes_.append(
                f"y has {len(y)} observations, fewer than the {need} the network "
                f"needs (lookback {L} + horizon {H} + 10 training windows): the forecast is "
                "the base's alone")
        config = TrainConfig.of(self)
        device = resolve_device(self.device)
        self._fit_base(y)
        self.mean_, self.std_ = float(y.mean()), float(y.std()) or 1.0
        if X is not None:
            self.x_mean_ = X.mean(axis=0)
            self.x_std_ = np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
        self.n_exog_ = 0 if X is None else X.shape[1]
        self.device_ = device
        if self.base_only_:
            return self._fit_base_only(y, X)
        ends = np.arange(self._history, len(y) - H + 1)                     # first target index
        deltas = y[ends[:, None] + np.arange(H)] - self._reference(y, ends)
        self.dscale_ = float(deltas.std()) or 1.0
        inputs = torch.tensor(self._features(y, X, ends), dtype=torch.float32, device=device)
        targets = torch.tensor(self._targets(y, ends), dtype=torch.float32, device=device)
        extra = [] if Xf is None else [torch.tensor(self._future(Xf, ends), dtype=torch.float32,
                                                    device=device)]
        # at least CALIBRATION_NEED windows in the calibrating half where a third of the
        # windows holds them: a finite 95% bound needs 19 (ceil((n + 1) 0.95) <= n)
        n_val = max(int(round(len(ends) * self.val_fraction)),
                    min(2 * CALIBRATION_NEED, len(ends) // 3))
        n_val = min(n_val, len(ends) - 1)
        split = len(ends) - n_val
        # the windows whose targets reach into the validation part are left out of training
        # (H - 1 of them), and the validation windows are halved: the first half stops the
        # training, the second, which the training never saw or chose on, sets w and the
        # intervals (a correction judged on the windows that picked its epoch looks better
        # than it is)
        gap = min(H - 1, max(0, split - 2))
        data = (inputs, *extra, targets)            # the net's inputs, then the targets
        train_data = tuple(t[:split - gap] for t in data)
        half = n_val // 2 if n_val >= 4 else 0
        stop_data = tuple(t[split:split + half] for t in data) if half else None
        val_data = tuple(t[split + half:] for t in data) if n_val > 0 else None

        def loss_fn(model, *batch):
            return F.mse_loss(model(*batch[:-1])[0], batch[-1])

        with seeded(self.seed, device):
            self.net_ = self._build(inputs.shape[-1]).to(device)
            self.history_ = train(self.net_, loss_fn, train_data, stop_data or val_data,
                                  config, description=f"{self.encoder} forecaster")
        self.shrink_ = self._shrink_to_validation(val_data)
        self.network_in_use_ = self.shrink_ > 0
        self.interval_widths_ = self._conformal_widths(val_data)
        self.n_calibration_ = 0 if val_data is None else int(len(val_data[-1]))
        self.n_features_ = int(inputs.shape[-1])
        self.y_tail_ = y[-self._history:].copy()
        self.base_state_ = self.base_.state_before(y, len(y) - len(self.y_tail_))
        self.x_tail_ = None if X is None else X[-self._history:].copy()
        self.n_obs_ = len(y)
        self.attention_ = None
        self.device_ = device
        return self

    def _fit_base(self, y: np.ndarray) -> None:
        """``base_``: the named base, or auto's choice; a base that cannot be fitted on ``y``
        is dropped for the next candidate (auto's next best, or auto's choice among the
        rest), with a note in ``notes_``."""
        m, H = self.effective_season, self.horizon
        self.base_scores_ = {}
        if self.base == "auto":
            name, self.base_scores_ = choose_base(y, m, H)
            order = sorted(self.base_scores_, key=self.base_scores_.get) or [name]
            order = [name] + [c for c in order if c != name]
        else:
            order = [self.base]
        self.base_, notes = fit_first(order, y, m)
        self.notes_ += notes
        self.base_name_ = self.base_.name

    def _fit_base_only(self, y: np.ndarray, X) -> "AttentionForecaster":
        """A series too short for the network: the base forecasts alone (``network_in_use_``
        False), and its intervals come from the base's own errors over the series' windows
        (in-sample: its parameters were fitted on them, so they run narrow)."""
        H = self.horizon
        self.dscale_ = 1.0
        self.n_features_ = 2 + self.n_exog_ + (2 if self.effective_season > 1 else 0)
        with seeded(self.seed, self.device_):
            self.net_ = self._build(self.n_features_).to(self.device_)
        self.history_ = TrainHistory()
        self.shrink_ = 0.0
        self.network_in_use_ = False
        ends = np.arange(max(1, self.base_.history), len(y) - H + 1)
        err = (np.abs(y[ends[:, None] + np.arange(H)] - self._reference(y, ends))
               if len(ends) else np.zeros((0, H)))
        self.interval_widths_ = conformal_widths(err, H, self.LEVELS)
        self.n_calibration_ = int(len(err))
        self.y_tail_ = y[-self._history:].copy()
        self.base_state_ = self.base_.state_before(y, len(y) - len(self.y_tail_))
        self.x_tail_ = None if X is None else X[-self._history:].copy()
        self.n_obs_ = len(y)
        self.attention_ = None
        return self

    @torch.no_grad()
    def _shrink_to_validation(self, val_data) -> float:
        """``w`` on the validation windows (:func:`~attnlab.models.forecast.shrink.
        correction_weight`), folded into the output layer."""
        if val_data is None:
            return 1.0
        self.net_.eval()
        out = self.net_(*val_data[:-1])[0].double()
        w = correction_weight(out, val_data[-1].double(), self.horizon)
        last = self.net_.pool.head[-1]
        last.weight.mul_(w)
        last.bias.mul_(w)
        return w

    LEVELS = (0.8, 0.95)

    def _check_fitted(self):
        check_is_fitted(self, "net_")

    @torch.no_grad()
    def _forecast(self, y: np.ndarray, X: np.ndarray | None,
                  offset: int, state=None, base=None, future=None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """One direct forecast of ``horizon`` steps after the end of ``y`` (whose first value
        sits at position ``offset`` of the fitted series; ``state``: the base's state just
        before it), and the attention over the window."""
        ref = self._reference(y, np.array([len(y)]), state, base)[0]
        if getattr(self, "base_only_", False):
            return ref, np.full(self.effective_lookback, np.nan)
        self.net_.eval()
        feats = self._features(y, X, np.array([len(y)]), offset)
        x = torch.tensor(feats, dtype=torch.float32, device=self.device_)
        extra = [] if future is None else [torch.tensor(
            self._future(future, np.array([0])), dtype=torch.float32, device=self.device_)]
        out, w = self.net_(x, *extra)
        pred = ref + out[0].double().cpu().numpy() * self.dscale_
        return pred, w[0].double().cpu().numpy()

    def start_of(self, y, start=None) -> int:
        """Where the history ``y`` starts, in steps after the fitted series' first observation
        (its place in the season): ``start`` if given (steps, or a date when the model was
        fitted on a dated series), else from ``y``'s date index when both are dated, else 0 (a
        history that starts where the fitted one started)."""
        cal = getattr(self, "calendar_", None)
        if start is None:
            import pandas as pd

            index = getattr(y, "index", None)
            if cal is None or not isinstance(index, pd.DatetimeIndex) or not len(index):
                return 0
            start = index[0]
        if isinstance(start, (int, np.integer)) and not isinstance(start, bool):
            return int(start)
        if cal is None:
            raise ValueError(f"start={start!r} is a date, but the model was fitted on a series "
                             "without a regular date index; give start as a number of steps "
                             "after the fitted series' first observation")
        try:
            return steps_between(cal, start)
        except (TypeError, ValueError) as err:
            if "calendar" in str(err):
                raise
            raise ValueError(f"start must be a number of steps or a date, got {start!r}"
                             ) from None

    def predict(self, horizon: int | None = None, y=None, X=None, X_future=None, *,
                start=None) -> np.ndarray:
        """Forecast ``horizon`` steps (default: the fitted horizon) after the fitted series,
        or after the history ``y`` if given (with exogenous columns, ``X`` for it too). A
        history is placed in the season by its dates (a pandas series on a date index, when
        the model was fitted on one), by ``start`` (see :meth:`start_of`), or else taken to
        start where the fitted series started; the base is refitted on it.

        A horizon beyond the fitted one is forecast recursively (the forecasts are fed back);
        that needs a model without exogenous columns. ``attention_`` holds the weights over
        the window of the first step. A model fitted with known-future covariates needs
        ``X_future``: their values at the fitted horizon's steps after the history (``horizon``
        rows, one per fitted step).
        """
        self._check_fitted()
        horizon = self.horizon if horizon is None else horizon
        if not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be an int >= 1, got {horizon!r}")
        if y is None:
            if X is not None:
                raise ValueError("X given without y: pass the history y it belongs to")
            if start is not None:
                raise ValueError("start places a history y in the season; pass y with it")
            hist, xh, offset = self.y_tail_, self.x_tail_, self.n_obs_ - len(self.y_tail_)
            state, base = self.base_state_, None
        else:
            offset = self.start_of(y, start)
            hist = as_series(y)
            xh = as_exog(X, len(hist))
            state, base = None, None
            if len(hist) < self._history:
                raise ValueError(f"y has {len(hist)} observations; a forecast reads the last "
                                 f"{self._history} (lookback, and one season for the "
                                 "reference), give at least that many")
            if self.base_.name in REFITTED:
                # the base is refitted on the history, as a statistical model would be (its
                # level, trend and season phase are the history's); the network's correction
                # is kept
                spec = self.base_.spec if self.base_.name == "arima" else None
                try:
                    base = fit_base(self.base_.name, hist, self.effective_season, spec)
                except (ValueError, np.linalg.LinAlgError) as err:
                    raise ValueError(f"the {self.base_.name} base could not be refitted on "
                                     f"this history of {len(hist)} observations ({err}); "
                                     "give a longer history") from None
        if (xh is None) != (self.n_exog_ == 0) or (xh is not None and xh.shape[1] != self.n_exog_):
            raise ValueError(f"the model was fitted with {self.n_exog_} exogenous column(s); "
                             f"X must have as many, got "
                             f"{0 if xh is None else xh.shape[1]}")
        n_future = getattr(self, "n_future_", 0)
        fut = None if X_future is None else future_rows(X_future, self.horizon)
        if n_future and fut is None:
            raise ValueError(f"the model was fitted with {n_future} known-future column(s); "
                             f"pass X_future with their values at the next {self.horizon} "
                             "steps")
        if not n_future and fut is not None:
            raise ValueError("X_future given, but the model was fitted without known-future "
                             "columns; refit with fit(..., X_future=...)")
        if fut is not None and fut.shape[1] != n_future:
            raise ValueError(f"X_future must have {n_future} column(s), got {fut.shape[1]}")
        if horizon > self.horizon and n_future:
            raise ValueError(f"horizon {horizon} > fitted horizon {self.horizon} needs known-"
                             "future values beyond it; refit with a longer horizon")
        if horizon > self.horizon and self.n_exog_:
            raise ValueError(f"horizon {horizon} > fitted horizon {self.horizon} needs future "
                             "exogenous values; refit with a longer horizon")
        series, preds, first_w = hist, [], None
        while sum(len(p) for p in preds) < horizon:
            p, w = self._forecast(series, xh, offset, state, base, fut)
            first_w = w if first_w is None else first_w
            preds.append(p)
            series = np.concatenate([series, p])
        self.attention_ = first_w
        return np.concatenate(preds)[:horizon]

    # ---- backtest -----------------------------------------------------------------------

    def backtest(self, y, X=None, n_origins: int = 10, step: int | None = None,
                 baselines: tuple[str, ...] = ("seasonal_naive", "ets", "ar"),
                 refit: bool = False, X_future=None) -> BacktestResult:
        """Rolling-origin evaluation. Origins ``T_k`` are the last ``n_origins`` positions
        ``step`` apart (default ``horizon``: non-overlapping test windows) such that every
        forecast ``y[T_k : T_k + horizon]`` lies inside ``y``. A copy of this forecaster is
        fitted once on ``y[:T_0]`` and forecasts from each origin with the history
        ``y[:T_k]``; with ``refit=True`` a fresh copy is fitted on ``y[:T_k]`` at every origin
        (as the statistical baselines are), ``n_origins`` times the cost. Baselines, any of
        ``seasonal_naive``, ``naive``, ``drift``, ``ets``, ``ar``, ``arima``, ``theta``,
        ``combination`` (:data:`.baselines.BASELINES`), see the
        same history. MASE divides by the in-sample seasonal-naive MAE on ``y[:T_0]``."""
        self._check_params()
        y = as_series(y)
        return rolling_origin(self, y, as_exog(X, len(y)), n_origins=n_origins, step=step,
                              baselines=baselines, refit=refit,
                              X_future=as_exog(X_future, len(y), "X_future"))

    # ---- equations, save / load ---------------------------------------------------------

    def equations(self) -> Equations:
        """The fitted model's equations and symbol table
        (:class:`~attnlab.models.latex.Equations`)."""
        return forecaster_equations(self)

    def to_latex(self) -> str:
        """The model's equations with its dimensions, as a LaTeX ``align`` fragment."""
        return self.equations().to_latex()

    def to_markdown(self) -> str:
        """The same equations as Markdown ``$$`` blocks."""
        return self.equations().to_markdown()

    _STATE = ("mean_", "std_", "dscale_", "n_exog_", "n_features_", "n_obs_")

    def _saved(self) -> tuple[dict, dict]:
        tensors = {"y_tail": torch.tensor(self.y_tail_)}
        if getattr(self, "n_future_", 0):
            tensors["xf_mean"] = torch.tensor(self.xf_mean_)
            tensors["xf_std"] = torch.tensor(self.xf_std_)
        if self.n_exog_:
            tensors["x_tail"] = torch.tensor(self.x_tail_)
            tensors["x_mean"] = torch.tensor(self.x_mean_)
            tensors["x_std"] = torch.tensor(self.x_std_)
        state = {k: getattr(self, k) for k in self._STATE}
        state["base"] = self.base_.to_dict()
        state["shrink"] = self.shrink_
        state["base_scores"] = self.base_scores_
        state["base_state"] = plain(self.base_state_)
        state["interval_widths"] = self.interval_widths_
        state["n_future"] = int(getattr(self, "n_future_", 0))
        state["calendar"] = getattr(self, "calendar_", None)
        state["n_calibration"] = getattr(self, "n_calibration_", None)
        state["base_only"] = bool(getattr(self, "base_only_", False))
        state["notes"] = list(getattr(self, "notes_", []))
        return state, tensors

    def _restore(self, state: dict, tensors: dict):
        for k in self._STATE:
            setattr(self, k, state[k])
        # a model saved before the hybrid bases existed used seasonal naive
        self.base_ = base_from_dict(state.get("base") or {
            "name": "seasonal_naive", "season": self.effective_season})
        self.base_name_ = self.base_.name
        self.base_scores_ = state.get("base_scores", {})
        self.shrink_ = float(state.get("shrink", 1.0))
        self.base_state_ = state.get("base_state")
        self.network_in_use_ = self.shrink_ > 0
        self.interval_widths_ = state.get("interval_widths") or {
            f"{q:g}": [float("inf")] * self.horizon for q in self.LEVELS}
        self.y_tail_ = tensors["y_tail"].numpy()
        self.n_future_ = int(state.get("n_future", 0))
        self.calendar_ = state.get("calendar")
        self.n_calibration_ = state.get("n_calibration")
        self.base_only_ = bool(state.get("base_only", False))
        self.notes_ = list(state.get("notes", []))
        if self.n_future_:
            self.xf_mean_ = tensors["xf_mean"].numpy()
            self.xf_std_ = tensors["xf_std"].numpy()
        self.x_tail_ = self.x_mean_ = self.x_std_ = None
        if self.n_exog_:
            self.x_tail_ = tensors["x_tail"].numpy()
            self.x_mean_ = tensors["x_mean"].numpy()
            self.x_std_ = tensors["x_std"].numpy()
        self.attention_ = None
        return lambda: self._build(self.n_features_)
