"""attnlab: attention from the formula to fast, inspectable code.

The public surface is loaded on first use (``attnlab.attention`` imports the core and torch
then), so that ``import attnlab`` and the ``attnlab`` command start at once and can be
interrupted cleanly.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC = {
    "AttentionOutput": "attnlab.core.spec",
    "Capabilities": "attnlab.core.registry",
    "attend": "attnlab.core.api",
    "attention": "attnlab.core.api",
    "attention_stats": "attnlab.core.stats",
    "list_backends": "attnlab.core.registry",
    "merge_partials": "attnlab.core.softmax",
    "register_backend": "attnlab.core.registry",
    "unregister_backend": "attnlab.core.registry",
    "which_backend": "attnlab.core.api",
}

__all__ = sorted([*_PUBLIC, "masks"])


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name == "masks":
        value = importlib.import_module("attnlab.masks")
    else:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
