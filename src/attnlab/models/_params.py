"""Estimator parameters, scikit-learn style: keyword-only after the first (passing them by
position still works until 0.2.0, with a FutureWarning that names them), and checked from
constraints declared as data."""

from __future__ import annotations

import functools
import inspect
import warnings
from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

KEYWORD_ONLY_IN = "0.2.0"


def keyword_only_after_first(init):
    """Wrap an estimator's ``__init__(self, first, *, ...)`` so that positional values after
    the first are mapped to their parameters by the signature's order, with a FutureWarning.
    The signature seen by scikit-learn's ``get_params`` is the wrapped one."""
    names = [p.name for p in inspect.signature(init).parameters.values()
             if p.kind is inspect.Parameter.KEYWORD_ONLY]

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        first, extra = args[:1], args[1:]
        if extra:
            if len(extra) > len(names):
                raise TypeError(f"{type(self).__name__}() takes at most {len(names) + 1} "
                                f"arguments, got {len(args)}")
            given = dict(zip(names, extra))
            clash = sorted(set(given) & set(kwargs))
            if clash:
                raise TypeError(f"{type(self).__name__}() got {clash} by position and by name")
            warnings.warn(f"{type(self).__name__}: pass {', '.join(given)} by name "
                          f"({', '.join(f'{k}={v!r}' for k, v in given.items())}); "
                          f"parameters after the first are keyword-only from attnlab "
                          f"{KEYWORD_ONLY_IN}", FutureWarning, stacklevel=2)
            kwargs.update(given)
        return init(self, *first, **kwargs)

    return wrapper


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


def one_of(*names: str) -> list:
    """The constraint "one of these strings"."""
    return [StrOptions(set(names))]
