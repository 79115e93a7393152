"""``attnlab bench``: time, peak memory and error of every backend and approximation, with the
peers a user would pick instead, in one run.

Three groups, each at B=1, H=8, D=64, float32:

* ``window``: a sliding window of 256 keys on each side. Peers: SDPA with the equivalent dense
  bool mask (built before timing) and FlexAttention with a BlockMask, compiled (forward only on
  CPU; its compile time is reported apart). Ours: tiled, blocksparse, auto.
* ``causal``: SDPA's own causal path against ``backend="auto"``.
* ``full``: no mask. SDPA against the approximations (Performer, linear, LSH, Linformer).

Every cell runs in a fresh process so that peak memory is its own (Linux: the high-water mark
of resident memory during one call, minus what was resident before it; see
:func:`measure_cell`). Errors are measured separately at a small N against a float64 exact
result, and the approximations' error is swept over their rank / features / chunk size.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnlab._files import write_text_atomic

WINDOW = (256, 256)
GROUPS = {
    "window": ["sdpa+dense", "flex", "tiled", "blocksparse", "auto"],
    "causal": ["sdpa-causal", "auto"],
    "full": ["sdpa", "performer", "linear", "lsh", "linformer"],
}
NO_BACKWARD = {"flex"}           # FlexAttention has no CPU backward
SIZES = [1024, 2048, 4096, 8192, 16384]
QUICK_SIZES = [1024, 2048]
CELL_TIMEOUT_S = 1800            # one cell's subprocess; the slowest measured takes ~60 s


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{key}:\s+(\d+)", f.read()).group(1)) * 1024


def _make(method: str, group: str, n: int, q, k, v):
    """A callable running ``method`` on q, k, v, and the setup seconds it took (compile)."""
    import torch
    import torch.nn.functional as F

    from attnlab import attention
    from attnlab.core import approx as A

    t0 = time.perf_counter()
    if method == "sdpa+dense":
        i = torch.arange(n)
        keep = ((i[None, :] - i[:, None]) >= -WINDOW[0]) & ((i[None, :] - i[:, None]) <= WINDOW[1])
        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # noqa: E731
    elif method == "sdpa-causal":
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    elif method == "sdpa":
        fn = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    elif method == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def band(b, h, qi, ki):
            return ((ki - qi) >= -WINDOW[0]) & ((ki - qi) <= WINDOW[1])

        block_mask = create_block_mask(band, None, None, n, n, device="cpu")
        compiled = torch.compile(flex_attention)
        compiled(q, k, v, block_mask=block_mask)                       # compile
        fn = lambda: compiled(q, k, v, block_mask=block_mask)  # noqa: E731
    elif method == "performer":
        w = A.orthogonal_gaussian(256, q.shape[-1])
        fn = lambda: A.performer_attention(q, k, v, w)  # noqa: E731
    elif method == "linear":
        fn = lambda: A.linear_attention(q, k, v)  # noqa: E731
    elif method == "lsh":
        fn = lambda: A.lsh_attention(q, k, v, chunk=128, n_buckets=8)  # noqa: E731
    elif method == "linformer":
        e = A.pooling_projection(n, 256)
        fn = lambda: A.linformer_attention(q, k, v, e, e)  # noqa: E731
    else:                                                   # one of attnlab's exact backends
        kw = ({"window": WINDOW} if group == "window" else {"causal": True} if group == "causal"
              else {})
        backend = method
        fn = lambda: attention(q, k, v, backend=backend, **kw)  # noqa: E731
    return fn, time.perf_counter() - t0


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def measure_cell(method: str, group: str, n: int, backward: bool, repeats: int,
                 b: int = 1, h: int = 8, d: int = 64) -> dict:
    """Run in a fresh process: time (min over repeats after a warm-up) and extra peak memory."""
    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, requires_grad=backward) for _ in range(3))
    cot = torch.randn(b, h, n, d)
    fn, setup_s = _make(method, group, n, q, k, v)

    def step():
        out = fn()
        if backward:
            out.backward(cot)
            q.grad = k.grad = v.grad = None

    seconds, peak_mib = time_and_peak(step, repeats)
    return {"method": method, "group": group, "n": n, "mode": "fwd+bwd" if backward else "fwd",
            "time_s": seconds, "peak_mib": peak_mib, "setup_s": setup_s}


def time_and_peak(step, repeats: int) -> tuple[float, float]:
    """Minimum time of ``step()`` over ``repeats`` runs after a warm-up, then the extra peak
    resident memory (MiB) of one more run. Linux only; call it in a fresh process."""
    step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    # Return freed heap pages to the kernel so the measured call cannot reuse resident pages,
    # then reset the peak-RSS counter.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status("VmRSS")
    step()
    return min(times), (_status("VmHWM") - base) / 2**20


def _run_cell(method, group, n, backward, repeats) -> dict:
    cmd = [sys.executable, "-m", "attnlab.bench", "--cell", method, group, str(n),
           str(int(backward)), str(repeats)]
    mode = "fwd+bwd" if backward else "fwd"
    try:                                   # a cell that hangs must not stall the whole run
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CELL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"method": method, "group": group, "n": n, "mode": mode,
                "error": f"timed out after {CELL_TIMEOUT_S} s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"method": method, "group": group, "n": n, "mode": mode,
                "error": lines[-1][:300] if lines else f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def errors(n: int = 1024) -> list[dict]:
    """Max and relative error of each method at N = n against a float64 exact result."""
    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
    from attnlab import attention

    out = []
    for group, methods in GROUPS.items():
        kw = ({"window": WINDOW} if group == "window" else {"causal": True} if group == "causal"
              else {})
        exact = attention(q.double(), k.double(), v.double(), backend="reference", **kw)
        for m in methods:
            if m == "flex":
                continue
            fn, _ = _make(m, group, n, q, k, v)
            with torch.no_grad():
                got = fn().double()
            out.append({"method": m, "group": group, "n": n,
                        "max_abs": float((got - exact).abs().max()),
                        "rel": float((got - exact).norm() / exact.norm())})
    return out


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def tradeoff(n: int = 1024) -> list[dict]:
    """Error and time of the approximations as their budget grows (features, rank, chunk)."""
    import torch

    from attnlab import attention
    from attnlab.core import approx as A

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
    exact = attention(q.double(), k.double(), v.double(), backend="reference")
    # FAVOR+'s variance grows like exp(|q|^2 + |k|^2): it is shown on unit-variance q, k and on
    # q, k scaled by 0.3 (flatter attention), where the estimator is in its 1/sqrt(m) regime.
    qs, ks = q * 0.3, k * 0.3
    exact_small = attention(qs.double(), ks.double(), v.double(), backend="reference")
    sweeps = {
        "performer": ([16, 32, 64, 128, 256, 512, 1024],
                      lambda m: (lambda w: lambda: A.performer_attention(q, k, v, w))(
                          A.orthogonal_gaussian(m, 64, torch.Generator().manual_seed(0)))),
        "performer (q, k x 0.3)": ([16, 32, 64, 128, 256, 512, 1024],
                                   lambda m: (lambda w: lambda: A.performer_attention(
                                       qs, ks, v, w))(A.orthogonal_gaussian(
                                           m, 64, torch.Generator().manual_seed(0)))),
        "linformer (pooling E, F)": ([16, 32, 64, 128, 256, 512, 1024],
                                     lambda r: (lambda e: lambda: A.linformer_attention(
                                         q, k, v, e, e))(
                                         A.pooling_projection(n, r))),
        "lsh": ([16, 32, 64, 128, 256, 512],
                lambda c: lambda: A.lsh_attention(q, k, v, chunk=c, n_buckets=8,
                                                  generator=torch.Generator().manual_seed(0))),
    }
    rows = []
    for name, (budgets, make) in sweeps.items():
        for budget in budgets:
            fn = make(budget)
            with torch.no_grad():
                fn()
                t0 = time.perf_counter()
                got = fn()
                dt = time.perf_counter() - t0
            ref = exact_small if "x 0.3" in name else exact
            rows.append({"method": name, "budget": budget, "time_s": dt,
                         "rel": float((got.double() - ref).norm() / ref.norm())})
    return rows


def machine() -> dict:
    """The machine a benchmark ran on: CPU, cores, torch threads, torch and Python versions."""
    import platform

    import torch

    cpu = "unknown"
    if os.path.exists("/proc/cpuinfo"):
        m = re.search(r"model name\s*:\s*(.+)", open("/proc/cpuinfo").read())
        cpu = m.group(1).strip() if m else cpu
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "capability": torch.backends.cpu.get_cpu_capability()}


def run(sizes: list[int], out_dir: Path, console=None) -> dict:
    """Every cell, the error table and the trade-off sweep; writes results.json (the figures:
    :func:`attnlab.plots.bench.plot`)."""
    from rich.progress import Progress

    jobs = [(g, m, n, bwd) for g, methods in GROUPS.items() for n in sizes for m in methods
            for bwd in (False, True) if not (bwd and m in NO_BACKWARD)]
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(jobs) + 2)
        for g, m, n, bwd in jobs:
            progress.update(task, description=f"{g}: {m} N={n} {'fwd+bwd' if bwd else 'fwd'}")
            repeats = 3
            rows.append(_run_cell(m, g, n, bwd, repeats))
            progress.advance(task)
        progress.update(task, description="errors at N=1024")
        err = errors()
        progress.advance(task)
        progress.update(task, description="error / speed trade-off")
        trade = tradeoff()
        progress.advance(task)
    result = {"machine": machine(), "window": list(WINDOW), "sizes": sizes, "cells": rows,
              "errors": err, "tradeoff": trade}
    write_text_atomic(Path(out_dir) / "results.json", json.dumps(result, indent=1))
    return result


def ratio(cells: list[dict], group: str, n: int, mode: str, num: str, den: str) -> float | None:
    """``num``'s time over ``den``'s for one (group, N, mode) cell, or None if either is missing."""
    get = {(c["group"], c["method"], c["n"], c["mode"]): c for c in cells if "time_s" in c}
    a, b = get.get((group, num, n, mode)), get.get((group, den, n, mode))
    return a["time_s"] / b["time_s"] if a and b else None

