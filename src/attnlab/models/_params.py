"""Estimator parameters, scikit-learn style: keyword-only after the first, and checked from
constraints declared as data."""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

# ---- constraints as data ----------------------------------------------------------------------
# Each estimator declares ``_parameter_constraints = {name: [constraint, ...]}`` in scikit-learn's
# own vocabulary and checks them with ``BaseEstimator._validate_params()``, which names the
# parameter, what it accepts and what it got. Checks that tie two parameters together (hidden
# size divisible by heads) stay in the estimator's ``_check_params``.

POSITIVE_INT = [Interval(Integral, 1, None, closed="left")]
OPTIONAL_POSITIVE_INT = [*POSITIVE_INT, None]
FRACTION = [Interval(Real, 0, 1, closed="left")]
POSITIVE = [Interval(Real, 0, None, closed="neither")]
NON_NEGATIVE = [Interval(Real, 0, None, closed="left")]
SEED = [Interval(Integral, 0, None, closed="left")]
FLAG = ["boolean"]
DEVICE = [str]

#: what every estimator trained by :func:`attnlab.models.training.train` takes
TRAINING = {"max_epochs": POSITIVE_INT, "batch_size": POSITIVE_INT, "lr": POSITIVE,
            "weight_decay": NON_NEGATIVE, "patience": POSITIVE_INT,
            "clip_norm": NON_NEGATIVE, "seed": SEED, "device": DEVICE, "verbose": FLAG}


class TrainingParams:
    """The parameters every estimator trained by :func:`attnlab.models.training.train` takes
    (the keys of :data:`TRAINING`), kept by one call in its ``__init__``:
    ``self._keep_training(locals())``."""

    def _keep_training(self, given: dict) -> None:
        """Set each training parameter from ``__init__``'s ``locals()``, unchanged (as
        scikit-learn requires of an ``__init__``)."""
        for name in TRAINING:
            setattr(self, name, given[name])


def one_of(*names: str) -> list:
    """The constraint "one of these strings"."""
    return [StrOptions(set(names))]
