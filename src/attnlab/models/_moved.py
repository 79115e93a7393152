"""Old import paths of modules that moved: each warns once and forwards every name."""

from __future__ import annotations

import importlib
import warnings

REMOVED_IN = "0.2.0"


def forward(old: str, new: str, *more: str):
    """Warn that ``old`` is now ``new`` and return a module ``__getattr__`` that forwards to
    it (public and private names alike), then to ``more`` (modules that took some of its
    names)."""
    warnings.warn(f"{old} is now {new}; the old path is removed in attnlab {REMOVED_IN}",
                  DeprecationWarning, stacklevel=3)
    modules = [importlib.import_module(m) for m in (new, *more)]

    def __getattr__(name: str):
        for module in modules:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
