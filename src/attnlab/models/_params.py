"""Estimator parameters after the first are keyword-only, scikit-learn style; passing them by
position still works until 0.2.0, with a FutureWarning that names them."""

from __future__ import annotations

import functools
import inspect
import warnings

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
