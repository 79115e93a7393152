"""A tile's score modifier compiled into one pass (inductor, ``torch.compile``).

Eager PyTorch runs a softcap and a user's ``score_mod`` as one elementwise operation after
another: ALiBi's ``score - slopes[h] * (q_idx - kv_idx).abs()`` and the change to log2 units are
four passes over each ``(BH, block_q, block_k)`` tile, a softcap's ``c * tanh(s / c)`` three
more. :func:`modifier` traces the softcap, the user's function and the factor into one
function and lets inductor fuse them into a single loop over the tile (measured on 2 cores,
ALiBi at N=4096: 2.0x a plain forward eager, see docs/benchmarks.md for the compiled ratio).

When it is used: a call whose scores number at least :data:`MIN_ENTRIES` (8 heads at 2,048
tokens), where the compile's first-call cost (seconds, see :func:`report`) is small against
the work; inductor's own cache keeps the compiled code across processes. ``ATTNLAB_COMPILE=0``
turns it off, ``=1`` uses it for every size (the tests), and where no C++ compiler is found,
or the function cannot be compiled, the eager path runs and one warning says so, once.

A modifier that sees positions only through ``q_idx - kv_idx`` (ALiBi) does not come here on
the tiled backend: the compiled tile loop adds it per diagonal
(:mod:`attnlab.core.engine.modifiers.diagonal`). Only the eager loop's forward and the statistics
use this module. The backward recomputes the modifier under autograd
(:class:`attnlab.core.score_mod.TileGrad`) so that gradients reach the tensors it captures.
"""

from __future__ import annotations

import collections
import functools
import os
import shutil
import threading
import time
import types
import warnings

import torch

# Calls with fewer scores than this run the modifier eagerly (a compile costs seconds).
MIN_ENTRIES = 8 * 2048 * 2048
_CACHE_SIZE = 16
_lock = threading.Lock()
_compiled: collections.OrderedDict = collections.OrderedDict()
_failed: dict[tuple, object] = {}         # key -> the modifier (kept: its id stays its own)
_warned = False
_timings: list[dict] = []


class CompileWarning(UserWarning):
    """The modifier runs eagerly: no compiler, or the function could not be compiled."""


def _setting() -> str:
    value = os.environ.get("ATTNLAB_COMPILE", "auto").strip().lower()
    if value not in ("0", "1", "auto", ""):
        raise ValueError(f"ATTNLAB_COMPILE must be 0, 1 or auto, got {value!r}; unset it for "
                         "the default (compile calls large enough to pay for it)")
    return value or "auto"


@functools.lru_cache(maxsize=8)
def _which(names: tuple) -> str | None:
    for name in names:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def compiler() -> str | None:
    """The C++ compiler inductor would use on CPU, or None (looked up once per ``$CXX``)."""
    return _which((os.environ.get("CXX"), "g++", "c++", "clang++"))


def _warn_once(reason: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"attnlab: score modifiers run eagerly ({reason}); every modifier "
                      "costs several passes per tile", CompileWarning, stacklevel=4)


def _template(cap, mod, factor):
    def body(s, b, h, q_idx, kv_idx):
        dtype = s.dtype
        if cap is not None:
            s = torch.tanh(s / cap) * cap
        if mod is not None:
            s = mod(s, b, h, q_idx, kv_idx)
        return (s * factor).to(dtype)             # as the eager path: the tile's dtype
    return body


def _fresh(fn, n: int):
    """A copy of ``fn`` with its own code object: dynamo keeps its compiled entries per code
    object, so every modifier gets its own cache instead of recompiling a shared one."""
    code = fn.__code__.replace(co_name=f"attnlab_modifier_{n}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


def wanted(entries: int, device: torch.device) -> bool:
    """Whether a call of ``entries`` scores on ``device`` uses the compiled modifier."""
    setting = _setting()
    if setting == "0" or device.type != "cpu":
        return False
    if setting == "auto" and entries < MIN_ENTRIES:
        return False
    if compiler() is None:
        _warn_once("no C++ compiler for torch.compile: install g++")
        return False
    return True


def modifier(score_mod, softcap: float | None, factor: float):
    """``f(s, b, h, q_idx, kv_idx) -> factor * score_mod(cap(s), ...)`` compiled, or None where
    it cannot be (the caller then runs the eager path)."""
    key = (id(score_mod), softcap, factor)
    with _lock:
        if key in _failed:
            return None
        if key in _compiled:
            _compiled.move_to_end(key)
            return _compiled[key][1]
        fn = torch.compile(_fresh(_template(softcap, score_mod, factor), len(_timings)),
                           dynamic=None)
        entry = Entry(fn, key, score_mod)
        _compiled[key] = (score_mod, entry)          # score_mod kept alive: the id stays its
        while len(_compiled) > _CACHE_SIZE:
            _compiled.popitem(last=False)
        return entry


class Entry:
    """A compiled modifier; its first call is timed and a failure falls back to eager."""

    def __init__(self, fn, key, score_mod):
        self.fn, self.key, self.score_mod = fn, key, score_mod
        self.first = True
        self.reason = None

    def __call__(self, s, b, h, q_idx, kv_idx):
        if not self.first:
            return self.fn(s, b, h, q_idx, kv_idx)
        start = time.perf_counter()
        try:
            out = self.fn(s, b, h, q_idx, kv_idx)
        except Exception as exc:                     # noqa: BLE001 - any compile failure
            with _lock:
                _failed[self.key] = self.score_mod
                _compiled.pop(self.key, None)
            self.reason = f"torch.compile failed: {type(exc).__name__}: {str(exc)[:120]}"
            return None
        self.first = False
        _timings.append({"modifier": getattr(self.score_mod, "__name__", "softcap"),
                         "shape": tuple(s.shape), "dtype": str(s.dtype),
                         "seconds": time.perf_counter() - start})
        return out


def fell_back(entry: Entry) -> None:
    """Called once the eager path has run a modifier that failed to compile (so a mistake in
    the user's function gets the eager path's error, not a compile warning)."""
    if entry.reason is not None:
        _warn_once(entry.reason)


def report() -> list[dict]:
    """The first-call (compile) time of each modifier compiled in this process."""
    return list(_timings)
