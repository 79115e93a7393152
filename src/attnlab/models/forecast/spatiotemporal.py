"""Many series at once: attention over each series' own past and over the other series.

:class:`SpatioTemporalForecaster` forecasts P series ("places": sensors, shops, industries)
``horizon`` steps ahead from the last ``lookback`` steps of all of them. To predict place p at a
future time, the query is p's state; the keys and values are the history of p and of the places
around it::

    h_{p,t}   = GRU(x_{p,t}, h_{p,t-1})                        one encoder shared by the places
    β_{t,p,·} = softmax_q( (W_q h_{p,t})·(W_k h_{q,t}) / √d )   spatial: over places, at time t,
                                                                only q ∈ N(p) ∪ {p} with a graph
    e_{p,t}   = h_{p,t} + Σ_q β_{t,p,q} W_v h_{q,t}
    α_{p,·}   = softmax_t( (U_q e_{p,L})·(U_k e_{p,t}) / √d )    temporal: over p's own L steps
    ŷ_{p,L+h} = base_{p,L+h} + s_p · [MLP([Σ_t α_{p,t} e_{p,t}; e_{p,L}])]_h

Both maps are outputs: ``temporal_attention_`` (P, L) and ``spatial_attention_`` (L, P, P), the
weights of the last forecast. The base is each place's seasonal naive (last value without a
season), and the output layer starts at zero, as in :class:`~.forecast.AttentionForecaster`.
A neighbour graph (``adjacency[p, q]`` True: q's history may inform p) restricts the spatial
attention; without one every place may attend to every place.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from attnlab.core.api import attention
from attnlab.models._params import (
    FRACTION,
    OPTIONAL_POSITIVE_INT,
    POSITIVE_INT,
    TRAINING,
    TrainingParams,
)
from attnlab.models.forecast.windows import WindowSettings
from attnlab.models.training import TrainConfig, resolve_device, seeded, train


class _SpatioTemporalNet(nn.Module):
    def __init__(self, n_in: int, d: int, horizon: int, dropout: float):
        super().__init__()
        self.rnn = nn.GRU(n_in, d, batch_first=True)
        self.sq, self.sk, self.sv = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.tq, self.tk = nn.Linear(d, d), nn.Linear(d, d)
        self.head = nn.Sequential(nn.Linear(2 * d, d), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(d, horizon))
        nn.init.zeros_(self.head[-1].weight)               # an untrained model is its base
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None):
        # x (B, P, L, F); keep (P, P) bool or None -> out (B, P, H), alpha (B, P, L),
        # beta (B, L, P, P)
        b, p, L, f = x.shape
        h, _ = self.rnn(x.reshape(b * p, L, f))
        h = h.reshape(b, p, L, -1).transpose(1, 2)                        # (B, L, P, d)
        sp = attention(self.sq(h), self.sk(h), self.sv(h), mask=keep, return_weights=True)
        e = (h + sp.out).transpose(1, 2)                                   # (B, P, L, d)
        last = e[:, :, -1:]                                                # (B, P, 1, d)
        tp = attention(self.tq(last), self.tk(e), e, return_weights=True)
        ctx = tp.out[:, :, 0]                                              # (B, P, d)
        out = self.head(torch.cat([ctx, last[:, :, 0]], dim=-1))
        return out, tp.weights[:, :, 0], sp.weights


class SpatioTemporalForecaster(WindowSettings, TrainingParams, BaseEstimator):
    """Forecast P series together with temporal and spatial attention (module docstring).

    Args:
        horizon: steps predicted at once; lookback: steps read (default 3 seasons, or 24).
        season: seasonal period of the base (seasonal naive) and of the phase features.
        adjacency: ``(P, P)`` bool, ``adjacency[p, q]`` True when q may inform p (self-loops
            are added), or None for attention over every place. Pass it to :meth:`fit` or here.
        hidden_size, dropout, val_fraction, max_epochs, batch_size, lr, weight_decay,
            patience, clip_norm, seed, device, verbose: as for ``AttentionForecaster``.
    """

    _parameter_constraints: dict = {
        "horizon": POSITIVE_INT, "lookback": OPTIONAL_POSITIVE_INT,
        "season": OPTIONAL_POSITIVE_INT, "hidden_size": POSITIVE_INT, "dropout": FRACTION,
        "val_fraction": FRACTION, **TRAINING}

    def __init__(self, horizon: int = 12, *, lookback: int | None = None,
                 season: int | None = None, hidden_size: int = 32, dropout: float = 0.1,
                 val_fraction: float = 0.2, max_epochs: int = 200, batch_size: int = 32,
                 lr: float = 2e-3, weight_decay: float = 1e-4, patience: int = 20,
                 clip_norm: float = 1.0, seed: int = 0, device: str = "auto",
                 verbose: bool = False):
        self.horizon = horizon
        self.lookback = lookback
        self.season = season
        self.hidden_size = hidden_size
        self.dropout = dropout
        self.val_fraction = val_fraction
        self._keep_training(locals())

    @property
    def _history(self) -> int:
        return max(self.effective_lookback, self.effective_season)

    # ---- input ---------------------------------------------------------------------------

    def _check_input(self, Y, adjacency):
        import pandas as pd

        names = [str(c) for c in Y.columns] if isinstance(Y, pd.DataFrame) else None
        try:
            Y = np.asarray(Y, dtype=float)
        except (TypeError, ValueError):
            raise ValueError("Y must be numeric, one column per place and one row per time "
                             "step") from None
        if Y.ndim != 2 or Y.shape[1] < 2:
            raise ValueError(f"Y must be (time steps, places) with at least 2 places, got "
                             f"shape {Y.shape}; for one series use AttentionForecaster")
        names = names or [f"place {i}" for i in range(Y.shape[1])]
        empty = [names[i] for i in range(Y.shape[1]) if not np.isfinite(Y[:, i]).any()]
        if empty:
            raise ValueError(f"place(s) {', '.join(empty)} have no history (no finite value); "
                             "drop them or give their observations")
        bad = [names[i] for i in range(Y.shape[1]) if not np.isfinite(Y[:, i]).all()]
        if bad:
            raise ValueError(f"place(s) {', '.join(bad[:5])} have missing or infinite values; "
                             "fill or interpolate them first (nothing is filled silently)")
        if len(Y) < self.min_length:
            raise ValueError(f"the series have {len(Y)} time steps; lookback "
                             f"{self.effective_lookback} + horizon {self.horizon} needs at least "
                             f"{self.min_length} (10 training windows); shorten lookback or "
                             "horizon")
        keep = None
        if adjacency is not None:
            a = np.asarray(adjacency)
            if a.shape != (Y.shape[1], Y.shape[1]):
                raise ValueError(f"adjacency must be (places, places) = {(Y.shape[1],) * 2}, "
                                 f"got shape {a.shape}")
            a = a.astype(bool)
            np.fill_diagonal(a, False)
            if not a.any():
                raise ValueError("adjacency has no edges between places; pass adjacency=None "
                                 "to let every place attend to every place, or the graph's "
                                 "edges")
            keep = a | np.eye(len(a), dtype=bool)
        return Y, names, keep

    def _features(self, Y: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """``(W, P, L, F)``: each place's window relative to its last value and standardized,
        and the seasonal phase."""
        L = self.effective_lookback
        idx = ends[:, None] - L + np.arange(L)[None, :]                  # (W, L)
        win = Y[idx].transpose(0, 2, 1)                                    # (W, P, L)
        level = win[..., -1:]
        feats = [(win - level) / self.dscale_[None, :, None],
                 (win - self.mean_[None, :, None]) / self.std_[None, :, None]]
        if self.effective_season > 1:
            m = self.effective_season
            ph = np.broadcast_to((2 * np.pi * (idx % m) / m)[:, None, :], win.shape)
            feats += [np.sin(ph), np.cos(ph)]
        return np.stack(feats, axis=-1)

    def _base(self, Y: np.ndarray, ends: np.ndarray) -> np.ndarray:
        m = self.effective_season
        h = np.arange(self.horizon)
        return Y[ends[:, None] - m + (h % m)[None, :]].transpose(0, 2, 1)   # (W, P, H)

    # ---- fit / predict --------------------------------------------------------------------

    def fit(self, Y, adjacency=None) -> "SpatioTemporalForecaster":
        """Fit on ``Y (time steps, places)`` (array or DataFrame, a column per place) and an
        optional neighbour graph ``adjacency (P, P)``."""
        self._validate_params()
        Y, self.places_, keep = self._check_input(Y, adjacency)
        H = self.horizon
        device = resolve_device(self.device)
        ends = np.arange(self._history, len(Y) - H + 1)
        self.mean_ = Y.mean(axis=0)
        self.std_ = np.where(Y.std(axis=0) > 0, Y.std(axis=0), 1.0)
        delta = Y[ends[:, None] + np.arange(H)].transpose(0, 2, 1) - self._base(Y, ends)
        self.dscale_ = np.where(delta.std(axis=(0, 2)) > 0, delta.std(axis=(0, 2)), 1.0)
        x = torch.tensor(self._features(Y, ends), dtype=torch.float32, device=device)
        t = torch.tensor(delta / self.dscale_[None, :, None], dtype=torch.float32, device=device)
        n_val = min(int(round(len(ends) * self.val_fraction)), len(ends) - 1)
        split = len(ends) - n_val
        self.keep_ = None if keep is None else torch.tensor(keep, device=device)

        def loss_fn(model, xb, tb):
            return F.mse_loss(model(xb, self.keep_)[0], tb)

        with seeded(self.seed, device):
            self.net_ = _SpatioTemporalNet(x.shape[-1], self.hidden_size, H,
                                           self.dropout).to(device)
            self.history_ = train(self.net_, loss_fn, (x[:split], t[:split]),
                                  (x[split:], t[split:]) if n_val > 0 else None,
                                  TrainConfig.of(self), description="spatio-temporal forecaster")
        self.y_tail_ = Y[-self._history:].copy()
        self.n_places_ = Y.shape[1]
        self.device_ = device
        return self

    @torch.no_grad()
    def predict(self, Y=None) -> np.ndarray:
        """``(horizon, P)`` forecasts after the fitted series, or after ``Y`` (the same
        places, at least ``lookback`` steps). Sets ``temporal_attention_`` (P, L) and
        ``spatial_attention_`` (L, P, P) of this forecast."""
        check_is_fitted(self, "net_")
        if Y is None:
            hist = self.y_tail_
        else:
            hist = np.asarray(Y, dtype=float)
            if hist.ndim != 2 or hist.shape[1] != self.n_places_:
                raise ValueError(f"Y must be (time steps, {self.n_places_} places), got shape "
                                 f"{hist.shape}")
            if len(hist) < self._history or not np.isfinite(hist[-self._history:]).all():
                raise ValueError(f"Y needs its last {self._history} steps finite for every "
                                 f"place, got {len(hist)} steps")
        self.net_.eval()
        end = np.array([len(hist)])
        x = torch.tensor(self._features(hist, end), dtype=torch.float32, device=self.device_)
        out, alpha, beta = self.net_(x, self.keep_)
        pred = self._base(hist, end)[0] + out[0].double().cpu().numpy() * self.dscale_[:, None]
        self.temporal_attention_ = alpha[0].double().cpu().numpy()
        self.spatial_attention_ = beta[0].double().cpu().numpy()
        return pred.T

    def backtest(self, Y, adjacency=None, n_origins: int = 5) -> dict:
        """Fit once on the data before the first origin, forecast from each origin (non-
        overlapping, ``horizon`` apart, the last ending at the end of ``Y``), beside each
        place's seasonal naive and AR; MASE per method (over places, origins and steps, each
        place scaled by its in-sample seasonal-naive MAE). Returns ``{"MASE": {method: v},
        "per_place": {method: (P,)}, "origins": [...], "model": fitted}``."""
        from sklearn.base import clone

        from attnlab.models.forecast.baselines import ar_forecast, seasonal_naive

        Y, names, _ = self._check_input(Y, adjacency)
        H, m = self.horizon, self.effective_season
        origins = len(Y) - H - H * np.arange(n_origins)[::-1]
        if origins[0] < self.min_length:
            raise ValueError(f"{n_origins} origins {H} apart need {self.min_length + H * n_origins}"
                             f" time steps, the series have {len(Y)}; use fewer origins")
        t0 = int(origins[0])
        model = clone(self).fit(Y[:t0], adjacency)
        scale = np.mean(np.abs(Y[m:t0] - Y[:t0 - m]), axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        err = {"spatio-temporal": [], "seasonal_naive": [], "ar": []}
        for t in origins:
            actual = Y[t:t + H]
            err["spatio-temporal"].append(np.abs(model.predict(Y[:t]) - actual))
            err["seasonal_naive"].append(np.abs(np.stack(
                [seasonal_naive(Y[:t, p], H, m) for p in range(Y.shape[1])], 1) - actual))
            err["ar"].append(np.abs(np.stack(
                [ar_forecast(Y[:t, p], H, m) for p in range(Y.shape[1])], 1) - actual))
        per_place = {k: (np.concatenate(v) / scale).mean(axis=0) for k, v in err.items()}
        return {"MASE": {k: float(v.mean()) for k, v in per_place.items()},
                "per_place": per_place, "origins": [int(o) for o in origins], "model": model,
                "places": names}


def simulated_crowd(n_steps: int = 600, seed: int = 0):
    """A crowd flowing along a street graph (the lantern-festival example): 8 places on two
    streets that join; the crowd enters at two gates (a daily rhythm, season 24, with random
    surges that last a few steps), and a share of each place's crowd walks on along its
    out-edges, arriving after the edge's delay (1 to 3 steps); every place adds noise.

    Returns ``(Y (n_steps, 8), adjacency (8, 8) bool, delays)``: ``adjacency[p, q]`` is True
    when people walk from q to p (q is upstream of p), the true spatial dependence a learned
    spatial attention can be checked against.
    """
    rng = np.random.default_rng(seed)
    edges = {(0, 1): 1, (1, 2): 2, (2, 3): 1, (4, 5): 1, (5, 6): 3, (6, 3): 2, (3, 7): 1}
    n = 8
    share = 0.45                                           # of a place's crowd that moves on
    t = np.arange(n_steps)
    own = np.zeros((n_steps, n))
    for src, phase in ((0, 0.0), (4, 2.0)):                # the crowd enters at two gates:
        burst = np.zeros(n_steps)                          # a daily rhythm and random surges
        for i in range(1, n_steps):                        # (AR(1), so a surge lasts a while)
            burst[i] = 0.8 * burst[i - 1] + rng.normal(0, 6.0)
        own[:, src] = np.maximum(
            30 + 20 * np.sin(2 * np.pi * (t - phase) / 24) ** 2 + burst, 0.0)
    Y = np.zeros((n_steps, n))
    for i in range(n_steps):
        y = own[i] + rng.normal(0, 1.0, n) + 5.0
        for (q, p), d in edges.items():
            if i >= d:
                y[p] += share * Y[i - d, q]
        Y[i] = np.maximum(y, 0.0)
    adjacency = np.zeros((n, n), dtype=bool)
    for (q, p) in edges:
        adjacency[p, q] = True
    return Y, adjacency, edges


def upstream_share(beta: np.ndarray, adjacency: np.ndarray) -> tuple[float, float]:
    """Share of the spatial attention (off the diagonal) on the true upstream places, averaged
    over the places that have any and over time, and the same share under uniform attention
    over every other place: ``(learned, uniform)``."""
    b = np.asarray(beta, dtype=float)                       # (L, P, P)
    p = b.shape[-1]
    off = b * (1 - np.eye(p))[None]
    tot = off.sum(-1)                                        # (L, P)
    on = (off * adjacency[None]).sum(-1)
    rows = adjacency.any(1)
    learned = float(np.mean(on[:, rows] / np.maximum(tot[:, rows], 1e-12)))
    uniform = float(np.mean(adjacency[rows].sum(1) / (p - 1)))
    return learned, uniform
