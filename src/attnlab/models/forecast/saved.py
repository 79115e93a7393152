"""What a fitted :class:`~attnlab.models.forecast.AttentionForecaster` says about itself and
keeps on disk: its equations (LaTeX, Markdown) and the state and tensors of
:class:`~attnlab.models.io.SavedEstimator`'s safetensors file."""

from __future__ import annotations

import torch

from attnlab.models.forecast.bases import base_from_dict
from attnlab.models.forecast.equations import forecaster_equations
from attnlab.models.forecast.inputs import plain
from attnlab.models.latex import Equations


class SavedForecaster:
    """The equations and the saved state of :class:`~attnlab.models.forecast.AttentionForecaster`
    (a mixin: the fitted attributes are the estimator's)."""

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
