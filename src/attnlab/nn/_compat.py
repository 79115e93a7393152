"""Deprecated argument names, kept working with a warning for one release."""

from __future__ import annotations

import warnings


def renamed_flag(where: str, old: str, old_value: bool | None, new: str, new_value: bool) -> bool:
    """The value of ``new``, or of ``old`` (with a DeprecationWarning) when a caller used it."""
    if old_value is None:
        return new_value
    warnings.warn(f"{where}: {old}= is deprecated, use {new}= (same meaning)",
                  DeprecationWarning, stacklevel=3)
    return bool(old_value) or new_value
