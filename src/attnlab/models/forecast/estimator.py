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
    choose_base,
    fit_first,
)
from attnlab.models.forecast.forecasting import ForecastFromHistory
from attnlab.models.forecast.inputs import (
    as_exog,
    as_series,
    calendar_of,
)
from attnlab.models.forecast.intervals import ConformalIntervals, conformal_widths
from attnlab.models.forecast.nets import RecurrentNet, TransformerNet
from attnlab.models.forecast.saved import SavedForecaster
from attnlab.models.forecast.shrink import correction_weight
from attnlab.models.forecast.windows import WindowSettings
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


class AttentionForecaster(ForecastFromHistory, SavedForecaster, WindowSettings, ConformalIntervals,
                          TrainingParams, io.SavedEstimator, BaseEstimator):
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
