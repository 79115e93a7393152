"""The tiled backend's tile loop compiled as a whole (C++, ``loop.cpp``), built on first use.

The eager tile loop of :mod:`attnlab.core.backends.tiled` issues a few PyTorch operations per
``(block_q, block_k)`` tile from Python. Here one C++ task owns a block of query rows of one
head (the forward; ``at::parallel_for`` over heads x query blocks) or one K/V head (the
backward) and walks its key blocks itself: the tile products are the ``sgemm`` that
libtorch_cpu carries (single-threaded inside torch's parallel region, as SDPA's own CPU kernel
calls it), the softmax of a tile is two vectorized passes (row maximum; ``exp2`` with the row
sum), the softcap one more. The arithmetic is the eager loop's: scores in log2 units, the
online softmax, ``P = exp2(S - lse log2 e)`` recomputed in the backward with
``D = rowsum(dO * O) - dlse``.

What it takes (:func:`wanted`): float32 compute (float16 and bfloat16 inputs are computed in
float32, as the eager loop does), CPU, the causal or window band or none, a softcap, and a
``score_mod`` or mask function that sees positions only through ``q_idx - kv_idx``
(:mod:`attnlab.core.engine.modifiers.diagonal`: ALiBi, relative biases, sliding windows; such a
mask function becomes the band where it keeps one run of diagonals). Tensor masks, other modifiers,
dropout and float64 run the eager loop, which stays the reference the compiled one is tested
against.

Build. ``python -m attnlab.core.engine.compiled.loop`` (run by ``make install``) compiles
``loop.cpp`` with the system's C++ compiler (``$CXX``, else g++, c++ or clang++) for this machine
(``-march=native``) against the installed torch, into ``$ATTNLAB_CACHE/loop``, else
``$XDG_CACHE_HOME/attnlab/loop``, else ``~/.cache/attnlab/loop``: about 45 s on 2 cores, once;
every later process loads the library (:func:`report` gives both times). The file's name is a
hash of the source, the flags, torch's version, the compiler and the CPU's features, so a
change of any of them builds anew.

``ATTNLAB_LOOP``: ``auto`` (default) uses the compiled loop where it is built, and builds it on
a call of at least :data:`MIN_BUILD_ENTRIES` scores; ``1`` builds it on first use whatever the
size (an error if it cannot be built); ``0`` runs the eager loop. Where no compiler is found or
the build fails, the eager loop runs and one warning says why, once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

from attnlab.core.engine.modifiers import diagonal
from attnlab.core.engine.tiles import LOG2E, relevance_wanted

ENV = "ATTNLAB_LOOP"
# In "auto", a call this large builds the loop when it is not yet built (the build costs
# about 45 s on 2 cores, the eager loop on 8 x 2048^2 scores about 0.1 s).
MIN_BUILD_ENTRIES = 8 * 2048 * 2048
BUILD_TIMEOUT_S = 900
_SOURCE = Path(__file__).with_name("loop.cpp")
_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-std=c++17", "-fPIC",
          "-shared")
# a band side that is absent: larger than any position, small enough that i + off +- it
# cannot overflow int64
_UNBOUNDED = 1 << 60

_lock = threading.Lock()
_state: dict = {"loaded": False, "failed": None, "warned": False, "timings": {}}


class LoopUnavailable(RuntimeError):
    """The compiled loop could not be built or loaded (the message says why)."""


class LoopWarning(UserWarning):
    """The tiled backend runs its eager loop: the compiled one could not be built."""


def setting() -> str:
    """``ATTNLAB_LOOP``'s value: ``"0"``, ``"1"`` or ``"auto"`` (a ValueError for others)."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("0", "1", "auto"):
        raise ValueError(f"{ENV} must be 0, 1 or auto, got {value!r}; unset it for the default "
                         "(use the compiled loop where it is built)")
    return value


def compiler() -> str | None:
    """The C++ compiler the build uses, or None (looked up once per ``$CXX`` and ``$PATH``)."""
    return _which(os.environ.get("CXX"), os.environ.get("PATH"))


@functools.lru_cache(maxsize=8)
def _which(cxx: str | None, path: str | None) -> str | None:
    for name in (cxx, "g++", "c++", "clang++"):
        if name and shutil.which(name, path=path):
            return shutil.which(name, path=path)
    return None


def cache_dir() -> Path:
    """Where built loops live: ``$ATTNLAB_CACHE/loop``, else ``$XDG_CACHE_HOME/attnlab/loop``,
    else ``~/.cache/attnlab/loop``."""
    root = os.environ.get("ATTNLAB_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "attnlab") if xdg else str(Path.home() / ".cache" / "attnlab")
    return Path(root) / "loop"


def _cpu_features() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _torch_paths() -> tuple[Path, Path]:
    root = Path(torch.__file__).parent
    return root / "include", root / "lib"


def _command(cxx: str, out: Path) -> list[str]:
    include, lib = _torch_paths()
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [cxx, *_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-isystem", str(include),
            "-isystem", str(include / "torch" / "csrc" / "api" / "include"), str(_SOURCE),
            "-o", str(out), f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]


def library_path(cxx: str | None = None) -> Path:
    """Where the built library for this source, torch, compiler and CPU lives."""
    return cache_dir() / f"attnlab_loop_{_key(_SOURCE, cxx or compiler() or 'c++')}.so"


@functools.lru_cache(maxsize=8)
def _key(source: Path, cxx: str) -> str:
    """The library's hash, computed once per process (a small call that finds the loop not
    built asks for it again, and must not run the compiler each time)."""
    h = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(_FLAGS).encode(), torch.__version__.encode(),
                 _compiler_version(cxx).encode(), _cpu_features().encode()):
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _compiler_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return cxx


def build(force: bool = False) -> Path:
    """Compile the loop for this machine (a no-op where it is built) and return its path.
    Raises :class:`LoopUnavailable` with the compiler's message on failure."""
    cxx = compiler()
    if cxx is None:
        raise LoopUnavailable("no C++ compiler found ($CXX, g++, c++ or clang++): install g++ "
                              "(apt install g++) for the compiled tile loop")
    target = library_path(cxx)
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    start = time.perf_counter()
    try:
        proc = subprocess.run(_command(cxx, Path(tmp)), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise LoopUnavailable(f"{Path(cxx).name} failed to build {_SOURCE.name}: "
                                  f"{(proc.stderr or proc.stdout).strip()[-600:]}")
        os.replace(tmp, target)                  # whole or not at all: others may load it now
    except subprocess.TimeoutExpired as exc:
        raise LoopUnavailable(f"building {_SOURCE.name} took over {BUILD_TIMEOUT_S} s") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _state["timings"]["build_s"] = time.perf_counter() - start
    return target


def _load(build_if_missing: bool) -> bool:
    with _lock:
        if _state["loaded"]:
            return True
        if _state["failed"] is not None:
            return False
        path = library_path()
        if not path.is_file() and not build_if_missing:
            return False
        try:
            path = build()
            start = time.perf_counter()
            torch.ops.load_library(str(path))
            _state["timings"]["load_s"] = time.perf_counter() - start
            _state["timings"]["path"] = str(path)
            _state["loaded"] = True
        except (LoopUnavailable, OSError, RuntimeError) as exc:
            _state["failed"] = str(exc)
            if setting() == "1":
                raise LoopUnavailable(str(exc)) from exc
            if not _state["warned"]:
                _state["warned"] = True
                warnings.warn(f"attnlab: the tiled backend runs its eager tile loop ({exc})",
                              LoopWarning, stacklevel=4)
            return False
        return True


def available(build_if_missing: bool = True) -> bool:
    """Whether the compiled loop is loaded (building it first where allowed and missing)."""
    if setting() == "0":
        return False
    return _load(build_if_missing)


def takes(spec, modifiers: bool = False) -> bool:
    """Whether the call ``spec`` describes is one the compiled loop computes; with
    ``modifiers``, a ``score_mod`` and a mask function of ``q_idx - kv_idx`` are taken too (see
    :func:`modifiers`), else neither is."""
    if not (spec.device.type == "cpu" and spec.compute_dtype == torch.float32
            and spec.mask is None
            and spec.dropout_p == 0 and spec.n_q > 0 and spec.n_k > 0):
        return False
    if spec.score_mod is None and spec.mask_fn is None:
        return True
    return modifiers and (
        (spec.score_mod is None or diagonal.score_mod_is_diagonal(spec.score_mod))
        and (spec.mask_fn is None or diagonal.mask_fn_is_diagonal(spec.mask_fn)))


def wanted(spec, modifiers: bool = False) -> bool:
    """Whether this call runs the compiled loop (see the module docstring and :func:`takes`)."""
    mode = setting()
    if mode == "0" or not takes(spec, modifiers) or relevance_wanted():
        return False
    if _state["loaded"]:
        return True
    return _load(build_if_missing=mode == "1" or spec.entries >= MIN_BUILD_ENTRIES)


def band_args(spec) -> tuple[int, int, int]:
    """``(offset, left, right)`` of the call's band as the loop takes them (an absent side
    as a number larger than any position)."""
    left, right = spec.band if spec.band is not None else (None, None)
    return (spec.offset, _UNBOUNDED if left is None else int(left),
            _UNBOUNDED if right is None else int(right))


def modifiers(spec, n_bh: int) -> tuple[torch.Tensor | None, tuple[int, int, int]]:
    """The call's ``score_mod`` and mask function as the loop takes them: ``(bias, band)``,
    bias ``(n_bh, N_q + N_k - 1)`` per diagonal ``kv_idx - q_idx + N_q - 1`` in natural units
    (None without either; under autograd, so its gradient reaches the tensors ``score_mod``
    captures), band as :func:`band_args`, narrowed to the diagonals a mask function keeps where
    they are one run for every head, else the mask is -inf in the bias."""
    off, left, right = band_args(spec)
    bias = diagonal.score_bias(spec, n_bh) if spec.score_mod is not None else None
    if spec.mask_fn is not None:
        keep = diagonal.mask_keep(spec)
        span = diagonal.interval(keep)
        if span is not None:                  # kv_idx - q_idx in [lo, hi]: a band
            lo = max(off - left, span[0] - (spec.n_q - 1))
            hi = min(off + right, span[1] - (spec.n_q - 1))
            left, right = off - lo, hi - off
        else:
            masked = torch.zeros(keep.shape, device=keep.device).masked_fill_(~keep, -torch.inf)
            bias = masked if bias is None else bias + masked
    return bias, (off, left, right)


def scaled_q(q: torch.Tensor, spec) -> torch.Tensor:
    """q as the loop reads it: times the score scale, and log2 e without a softcap."""
    return q * (spec.score_scale * (1.0 if spec.softcap is not None else LOG2E))


_NONE = torch.empty(0)


def forward(q_s, k, v, spec, block_q: int, block_k: int, diag: torch.Tensor | None = None,
            band: tuple[int, int, int] | None = None):
    """``(out (BH, N_q, D_v), lse (BH, N_q))``, lse in natural units. ``q_s`` from
    :func:`scaled_q`; k, v ``(BKV, N_k, ·)``; float32. ``diag``: the per-diagonal bias in log2
    units; ``band``: ``(offset, left, right)`` where not the call's."""
    off, left, right = band if band is not None else band_args(spec)
    out, lse = torch.ops.attnlab_loop.forward(
        q_s, k, v, _NONE if diag is None else diag, spec.kv_groups, off, left, right,
        float(spec.softcap or 0.0), block_q, block_k)
    return out, lse


def backward(q_s, q, k, v, out, lse, d_out, d_lse, spec, block_q: int, block_k: int,
             diag: torch.Tensor | None = None, band: tuple[int, int, int] | None = None,
             diag_grad: bool = False):
    """``(dq, dk, dv, d diag)`` of :func:`forward`'s call; d diag is the gradient of the bias
    in natural units (empty unless ``diag_grad``)."""
    delta = torch.einsum("bnd,bnd->bn", d_out, out)
    if d_lse is not None:
        delta = delta - d_lse
    off, left, right = band if band is not None else band_args(spec)
    dq, dk, dv, d_diag = torch.ops.attnlab_loop.backward(
        q_s, q, k, v, _NONE if diag is None else diag, lse, d_out, delta, spec.kv_groups, off,
        left, right, float(spec.softcap or 0.0), block_q, block_k, diag_grad)
    c = spec.score_scale
    return dq.mul_(c), dk.mul_(c), dv, d_diag


# Tiles of a finite band (a window): smaller tiles waste fewer scores outside it (measured at
# N = 16384, window +-256: 128 x 128 tiles 0.21 s, 64 x 64 0.24 s, 256 x 256 0.23 s)
BAND_TILES = (128, 128)


class Attention(torch.autograd.Function):
    """``(out, lse)`` of one call on the compiled loop, with its backward; q ``(BH, N_q, D_k)``,
    k ``(BKV, N_k, D_k)``, v ``(BKV, N_k, D_v)``, float32; ``bias`` and ``band`` from
    :func:`modifiers` (None: no bias, the call's band)."""

    @staticmethod
    def forward(ctx, q, k, v, spec, block_q: int, block_k: int, bias=None, band=None):
        """``(out, lse)``; q, k, v saved with the output and lse for the backward."""
        diag = None if bias is None else (bias.detach().float() * LOG2E).contiguous()
        out, lse = forward(scaled_q(q, spec), k, v, spec, block_q, block_k, diag, band)
        ctx.spec, ctx.sizes, ctx.band = spec, (block_q, block_k), band
        ctx.save_for_backward(q, k, v, out, lse, diag)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        """``(dq, dk, dv, d bias)`` with every tile's probabilities recomputed from lse."""
        q, k, v, out, lse, diag = ctx.saved_tensors
        diag_grad = diag is not None and ctx.needs_input_grad[6]
        dq, dk, dv, d_diag = backward(scaled_q(q, ctx.spec), q, k, v, out, lse,
                                      d_out.contiguous(), d_lse, ctx.spec, *ctx.sizes, diag,
                                      ctx.band, diag_grad)
        return dq, dk, dv, None, None, None, d_diag if diag_grad else None, None


def report() -> dict:
    """What this process did: the build's seconds (where it built), the load's, the path, or
    why the loop is not used."""
    return {**_state["timings"], "loaded": _state["loaded"], "failed": _state["failed"]}


def main(argv: list[str] | None = None) -> int:
    """Build the loop for this machine (``make install`` runs it); 0 also where it cannot be
    built (the library then runs the eager loop), with one line saying why."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m attnlab.core.engine.compiled.loop",
                                     description="build attnlab's compiled tile loop")
    parser.add_argument("--force", action="store_true", help="rebuild even if built")
    args = parser.parse_args(argv)
    try:
        path = build(force=args.force)
        torch.ops.load_library(str(path))
    except LoopUnavailable as exc:
        print(f"attnlab: compiled tile loop not built ({exc}); the eager loop will run",
              file=sys.stderr)
        return 0                        # optional: the library works without it
    built = _state["timings"].get("build_s")
    print(f"attnlab: compiled tile loop {'built in %.0f s' % built if built else 'found'}: "
          f"{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
