"""Old import paths of modules that moved: each warns once and forwards every name."""

from __future__ import annotations

import importlib
import warnings

REMOVED_IN = "0.2.0"


def forward(old: str, new: str):
    """Warn that ``old`` is now ``new`` and return a module ``__getattr__`` that forwards to
    it (public and private names alike)."""
    warnings.warn(f"{old} is now {new}; the old path is removed in attnlab {REMOVED_IN}",
                  DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)

    def __getattr__(name: str):
        return getattr(module, name)

    return __getattr__
