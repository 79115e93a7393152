"""The base contract and the bases without a statistical model to fit: seasonal naive,
naive, the mean, drift, and the median combination of the fitted ones."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Base(ABC):
    """A fitted base. ``forecasts(y, ends, horizon, state)`` -> ``(len(ends), horizon)``: the
    forecast made after observing ``y[:e]`` for each ``e`` in ``ends``; ``state`` is the
    filter's state just before ``y[0]`` (None: the fitted initial state)."""

    name = "base"
    history = 1                                  # observations a forecast needs at least

    @abstractmethod
    def forecasts(self, y, ends, horizon, state=None) -> np.ndarray:
        """``(len(ends), horizon)`` forecasts."""

    def state_before(self, y, t: int):
        """The filter state just before ``y[t]`` (None for bases without one)."""
        return None

    def to_dict(self) -> dict:
        """The fitted parameters as plain values (saved in config.json)."""
        return {"name": self.name}

    @classmethod
    def fit(cls, y: np.ndarray, season: int, spec=None) -> "Base":
        """The base fitted on ``y`` (``spec``: what a refit at another origin keeps)."""
        return cls()

    @classmethod
    def from_dict(cls, d: dict) -> "Base":
        """The base :meth:`to_dict` wrote."""
        return cls(**{k: v for k, v in d.items() if k != "name"})


class SeasonalNaive(Base):
    """The value one season earlier."""
    name = "seasonal_naive"

    def __init__(self, season: int):
        self.m = max(1, int(season))
        self.history = self.m

    @classmethod
    def fit(cls, y, season, spec=None):
        """Nothing to estimate: the season's length."""
        return cls(season)

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end of ``y``."""
        h = np.arange(horizon)
        return y[np.asarray(ends)[:, None] - self.m + (h % self.m)[None, :]]

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name, "season": self.m}


class Naive(SeasonalNaive):
    """The last value."""
    name = "naive"

    def __init__(self, season: int = 1):
        super().__init__(1)

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name}


class Mean(Base):
    """No base: the training mean (the network predicts the deviation from it)."""

    name = "none"

    def __init__(self, mean: float):
        self.mean = float(mean)

    @classmethod
    def fit(cls, y, season, spec=None):
        """The training mean."""
        return cls(float(np.mean(y)))

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end of ``y``."""
        return np.full((len(ends), horizon), self.mean)

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name, "mean": self.mean}


class Drift(Base):
    """The last value plus the average step of the history: ``y_T + h (y_T - y_1) / (T - 1)``.
    Its state is the history's first value and the number of steps before the given series."""

    name = "drift"
    history = 2

    def state_before(self, y, t: int):
        """The first value of the series and the position ``t``."""
        return (float(y[0]), int(t))

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end."""
        ends = np.asarray(ends)
        first, before = (float(y[0]), 0) if state is None else state
        steps = np.maximum(ends - 1 + before, 1)
        slope = (y[ends - 1] - first) / steps
        return y[ends - 1][:, None] + slope[:, None] * np.arange(1, horizon + 1)[None, :]


class Combination(Base):
    """The median, step by step, of its component bases' forecasts."""

    name = "combination"

    def __init__(self, parts: list[Base]):
        self.parts = list(parts)
        self.history = max(p.history for p in self.parts)

    @classmethod
    def fit(cls, y, season, spec=None):
        """ETS, ARIMA and Theta, each fitted on ``y``."""
        from attnlab.models.forecast.bases import COMBINED, fit_base

        return cls([fit_base(p, y, season) for p in COMBINED])

    @classmethod
    def from_dict(cls, d):
        """The components' saved parameters."""
        from attnlab.models.forecast.bases import base_from_dict

        return cls([base_from_dict(p) for p in d["parts"]])

    def state_before(self, y, t: int):
        """Every component's state."""
        return [p.state_before(y, t) for p in self.parts]

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end."""
        states = state or [None] * len(self.parts)
        return np.median(np.stack([p.forecasts(y, ends, horizon, s)
                                   for p, s in zip(self.parts, states)]), axis=0)

    def to_dict(self):
        """The components' parameters."""
        return {"name": self.name, "parts": [p.to_dict() for p in self.parts]}
