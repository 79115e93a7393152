"""The GPU check of attnlab's kernels, in one command on a CUDA machine.

    python scripts/gpu_check.py --out DIR                       # everything (about 8 minutes)
    python scripts/gpu_check.py --out DIR --sections conformance dist
    python scripts/gpu_check.py --out DIR --sections timing --sizes 1024 4096 --budget 200
    python scripts/gpu_check.py --dry-run                       # what it would run (any machine)

Sections:

``conformance``
    :func:`attnlab.testing.check_backend` with ``device="cuda"`` on every exact backend, in
    every dtype it declares among float64, float32, bfloat16 and float16 (outputs, lse, dQ, dK,
    dV against the float64 reference, relative to the same-precision reference). Then the
    Triton kernels at their compiled tile sizes (64 x 64): lengths 1, 63, 65, 129, 1000 and
    2049 on both axes (N_q > N_k included), head dims 64 and 128, with causal, window, key
    padding, per-sequence lengths (varlen), grouped-query K/V and softcap, forward and
    backward, in float32, bfloat16 and float16, by the rule of ``tests/helpers.py``.
``dist``
    A one-rank NCCL group through the sharded code paths (``ring_attention``,
    ``ulysses_attention``, zig-zag and contiguous), and :func:`simulate_ring` on CUDA tensors
    for P = 2, 3, 4, forward and backward against the float64 reference.
``timing``
    CUDA events, median of ``--reps`` after warm-up; B=4, H=16, D in ``--dims``, bfloat16,
    N in ``--sizes``, forward (no autograd) and forward + backward. Dense and causal:
    ``triton`` against SDPA restricted to its flash kernel, to its cuDNN kernel, and compiled
    FlexAttention. A window of +-256: ``triton`` (band), ``triton_blocksparse``, compiled Flex
    with a block mask, and dense flash for scale. attnlab's other backends (``sdpa`` through
    :func:`attnlab.attention`, ``tiled``, ``blocksparse``) are timed at N <= 4096 so that
    ``auto`` has a measured cost for every backend it may pick on CUDA. Each measurement is
    appended to ``timings.jsonl`` as it is made, so a run cut short keeps what it measured.

Writes ``DIR/gpu_check.md`` (the tables) and ``DIR/timings.jsonl``, and prints both.
``--costs-from DIR/timings.jsonl`` (any machine) prints the per-score cost table that ``auto``
reads on CUDA (``RATES`` in ``src/attnlab/core/cuda_cost.py``).
``--figure PATH`` (any machine) draws the kernels' launch grids.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXACT = ("reference", "sdpa", "tiled", "blocksparse", "triton", "triton_blocksparse")
APPROX = ("performer", "linear", "lsh")
DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
START = time.monotonic()


def _log(*parts):
    print(f"[{time.monotonic() - START:6.1f}s]", *parts, flush=True)


# ----------------------------------------------------------------------------- conformance

def conformance() -> tuple[list[str], int]:
    from attnlab import attention, list_backends
    from attnlab.testing import check_backend

    lines = ["| backend | dtypes | cases passed | skipped (declared) | failed | seconds |",
             "|---|---|---:|---:|---:|---:|"]
    failed = 0
    for name in EXACT:
        dtypes = [d for d in DTYPES if d in list_backends()[name].capabilities.dtypes]
        t0 = time.perf_counter()
        try:
            rep = check_backend(name, device="cuda", dtypes=dtypes)
        except Exception as exc:                         # recorded, not fatal
            failed += 1
            lines.append(f"| {name} | - | - | - | crashed: {type(exc).__name__}: "
                         f"{str(exc)[:120]} | - |")
            traceback.print_exc()
            continue
        skipped = sum(r.skipped for r in rep.results)
        bad = len(rep.failures)
        failed += bad
        lines.append(f"| {name} | {', '.join(str(d).removeprefix('torch.') for d in dtypes)} | "
                     f"{len(rep.results) - skipped - bad} | {skipped} | {bad} | "
                     f"{time.perf_counter() - t0:.0f} |")
        for r in rep.failures:
            _log(f"FAIL {name} {r.case} [{r.dtype}]: {r.detail} ({r.smallest})")
            lines.append(f"|   {name}: {r.case} [{r.dtype}] | {r.detail} | | | | |")
        _log("check_backend", name, f"{bad} failed")
    q, k, v = (torch.randn(2, 4, 300, 32, device="cuda") for _ in range(3))
    for name in APPROX:
        out = attention(q, k, v, backend=name)
        ok = out.shape == q.shape and bool(torch.isfinite(out).all())
        failed += not ok
        lines.append(f"| {name} (approximate: runs, finite) | fp32 | {int(ok)} | 0 | "
                     f"{int(not ok)} | - |")
    return lines, failed


def _tile_grid():
    """(backend, label, shape (B, H, H_kv, N_q, N_k, D), options) at the compiled tiles."""
    from attnlab import masks

    lengths = [(1, 1), (63, 65), (129, 129), (1000, 129), (129, 1000), (2049, 2049)]
    grid = []
    for d in (64, 128):
        for n_q, n_k in (lengths if d == 64 else [(65, 63), (1000, 1000)]):
            s = (2, 4, 4, n_q, n_k, d)
            opts = {
                "none": {},
                "causal": {"causal": True},
                "window (100, 30)": {"window": (100, 30)},
                "key padding": {"mask": masks.key_padding(torch.tensor([max(n_k - 7, 1), 0]))},
                "varlen causal": {"mask": masks.varlen(torch.tensor([n_q, max(n_q // 2, 1)]),
                                                       torch.tensor([max(n_k - 3, 1), n_k]),
                                                       causal=True)},
                "softcap 5 + causal": {"softcap": 5.0, "causal": True},
            }
            for label, kw in opts.items():
                grid.append(("triton", label, s, kw))
            grid.append(("triton", "GQA 4:1 + causal", (2, 8, 2, n_q, n_k, d),
                         {"enable_gqa": True, "causal": True}))
            for label in ("causal", "window (100, 30)", "key padding", "softcap 5 + causal"):
                grid.append(("triton_blocksparse", label, s, opts[label]))
            grid.append(("triton_blocksparse", "dilated 3", s,
                         {"mask": masks.dilated(3, 48, 48, offset=n_k - n_q)}))
            grid.append(("triton_blocksparse", "GQA 4:1 + window", (2, 8, 2, n_q, n_k, d),
                         {"enable_gqa": True, "window": (100, 30)}))
    return grid


def kernel_grid(device: str = "cuda", grid=None) -> tuple[list[str], int]:
    from tests.helpers import assert_backend_matches

    results: dict[tuple[str, str], list[int]] = {}
    fails = []
    for backend, label, (b, h, hk, nq, nk, d), kw in (grid or _tile_grid()):
        g = torch.Generator().manual_seed(nq * 31 + nk)
        q = torch.randn(b, h, nq, d, generator=g, dtype=torch.float64).to(device)
        k = torch.randn(b, hk, nk, d, generator=g, dtype=torch.float64).to(device)
        v = torch.randn(b, hk, nk, d, generator=g, dtype=torch.float64).to(device)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            key = (backend, label)
            results.setdefault(key, [0, 0])
            try:
                assert_backend_matches(q, k, v, backend, dtype, **kw)
                results[key][0] += 1
            except Exception as exc:
                results[key][1] += 1
                msg = f"{backend} {label} N_q={nq} N_k={nk} D={d} {dtype}: " \
                      f"{type(exc).__name__}: {str(exc)[:200]}"
                fails.append(msg)
                _log("FAIL", msg)
    lines = ["| kernel | mask | passed | failed |", "|---|---|---:|---:|"]
    lines += [f"| {b} | {m} | {p} | {f} |" for (b, m), (p, f) in results.items()]
    lines += ["", *(f"- {m}" for m in fails)]
    return lines, len(fails)


# ----------------------------------------------------------------------------- distributed

def _rel(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def dist_checks(device: str = "cuda", backend: str = "nccl") -> tuple[list[str], int]:
    import torch.distributed as dist

    from attnlab import attention
    from attnlab.distributed import ring_attention, simulate_ring, ulysses_attention

    lines = ["| path | world | layout | mask | dtype | out rel. err | grad rel. err | "
             "same-dtype reference err | pass |", "|---|---:|---|---|---|---:|---:|---:|---|"]
    failed = 0
    init = Path(tempfile.mkdtemp()) / "store"
    extra = {"device_id": torch.device("cuda", 0)} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=f"file://{init}", rank=0, world_size=1,
                            **extra)
    try:
        g = torch.Generator().manual_seed(0)
        base = [torch.randn(2, 4, 300, 64, generator=g, dtype=torch.float64) for _ in range(3)]
        do = torch.randn(2, 4, 300, 64, generator=g, dtype=torch.float64).to(device)

        def grads(fn, dtype):
            ts = [t.to(device, dtype).requires_grad_() for t in base]
            out = fn(*ts)
            out = out[0] if isinstance(out, tuple) else out
            gs = torch.autograd.grad(out, ts, do.to(dtype))
            return out.detach(), gs

        def compare(label, world, layout, maskname, kw, fn, dtype):
            nonlocal failed
            gold = grads(lambda q, k, v: attention(q, k, v, backend="reference", **kw),
                         torch.float64)
            ref = grads(lambda q, k, v: attention(q, k, v, backend="reference", **kw), dtype)
            got = grads(fn, dtype)
            e_out = _rel(got[0], gold[0])
            e_grad = max(_rel(a, b) for a, b in zip(got[1], gold[1]))
            r_out = _rel(ref[0], gold[0])
            r_grad = max(_rel(a, b) for a, b in zip(ref[1], gold[1]))
            e_ref = max(r_out, r_grad)
            # the rule of tests/helpers.py: 2x / 3x the same-dtype reference's error, plus a
            # floor of a few ulps times sqrt(reduction length)
            floor = 4 * torch.finfo(dtype).eps * (300 + 64) ** 0.5
            ok = e_out <= 2 * r_out + floor and e_grad <= 3 * r_grad + floor
            failed += not ok
            lines.append(f"| {label} | {world} | {layout} | {maskname} | "
                         f"{str(dtype).removeprefix('torch.')} | {e_out:.2e} | {e_grad:.2e} | "
                         f"{e_ref:.2e} | {'yes' if ok else 'NO'} |")

        for maskname, kw in (("causal", {"causal": True}), ("window 40", {"window": (40, 0)}),
                             ("none", {})):
            for dtype in (torch.float64, torch.float32):
                for layout in ("zigzag", "contiguous"):
                    compare(f"ring_attention ({backend})", 1, layout, maskname, kw,
                            lambda q, k, v, lay=layout, kw=kw: ring_attention(
                                q, k, v, layout=lay, timeout=60, **kw), dtype)
                compare(f"ulysses_attention ({backend})", 1, "contiguous", maskname, kw,
                        lambda q, k, v, kw=kw: ulysses_attention(q, k, v, timeout=60, **kw),
                        dtype)
                for world in (2, 3, 4):
                    for layout in ("zigzag", "contiguous"):
                        compare(f"simulate_ring ({device})", world, layout, maskname, kw,
                                lambda q, k, v, p=world, lay=layout, kw=kw: simulate_ring(
                                    q, k, v, p, layout=lay, **kw)[0], dtype)
        _log("dist checks done")
    finally:
        dist.destroy_process_group()
    return lines, failed


# ----------------------------------------------------------------------------- timing

def _time(fn, reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls after warm-up (CUDA events)."""
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    if time.perf_counter() - t0 > 8:                       # compile included; one more
        reps = 1
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _cases(q, k, v, n, flex, block_masks, small):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnlab import attention

    def sdpa_with(kind, **kw):
        def f():
            with sdpa_kernel(kind):
                return F.scaled_dot_product_attention(q, k, v, **kw)
        return f

    def ours(backend, **kw):
        return lambda: attention(q, k, v, backend=backend, **kw)

    cases = {
        ("dense", "sdpa flash"): sdpa_with(SDPBackend.FLASH_ATTENTION),
        ("dense", "sdpa cudnn"): sdpa_with(SDPBackend.CUDNN_ATTENTION),
        ("dense", "flex compiled"): lambda: flex(q, k, v),
        ("dense", "attnlab triton"): ours("triton"),
        ("causal", "sdpa flash"): sdpa_with(SDPBackend.FLASH_ATTENTION, is_causal=True),
        ("causal", "sdpa cudnn"): sdpa_with(SDPBackend.CUDNN_ATTENTION, is_causal=True),
        ("causal", "flex compiled"): lambda: flex(q, k, v, block_mask=block_masks["causal"]),
        ("causal", "attnlab triton"): ours("triton", causal=True),
        ("causal", "attnlab triton_blocksparse"): ours("triton_blocksparse", causal=True),
        ("window 256", "sdpa flash (dense)"): sdpa_with(SDPBackend.FLASH_ATTENTION),
        ("window 256", "flex compiled"): lambda: flex(q, k, v, block_mask=block_masks["window"]),
        ("window 256", "attnlab triton"): ours("triton", window=256),
        ("window 256", "attnlab triton_blocksparse"): ours("triton_blocksparse", window=256),
    }
    if small:             # attnlab's other backends on CUDA: costs for auto
        cases.update({
            ("dense", "attnlab sdpa"): ours("sdpa"),
            ("dense", "attnlab tiled"): ours("tiled"),
            ("causal", "attnlab sdpa"): ours("sdpa", causal=True),
            ("causal", "attnlab tiled"): ours("tiled", causal=True),
            ("causal", "attnlab blocksparse"): ours("blocksparse", causal=True),
            ("window 256", "attnlab sdpa"): ours("sdpa", window=256),
            ("window 256", "attnlab tiled"): ours("tiled", window=256),
            ("window 256", "attnlab blocksparse"): ours("blocksparse", window=256),
        })
    return cases


def timings(sizes, dims, reps, budget, out_jsonl: Path, batch=4, heads=16) -> list[dict]:
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    deadline = START + budget
    for n in sizes:
        for d in dims:
            if time.monotonic() > deadline:
                _log(f"budget spent: N={n} D={d} not measured")
                rows.append({"n": n, "d": d, "skipped": "budget"})
                continue
            q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)
            bms = {"causal": create_block_mask(lambda b, h, i, j: i >= j, None, None, n, n,
                                               device="cuda"),
                   "window": create_block_mask(lambda b, h, i, j: (i - j).abs() <= 256, None,
                                               None, n, n, device="cuda")}
            for (mask, label), fn in _cases(q, k, v, n, flex, bms, n <= 4096).items():
                if time.monotonic() > deadline:
                    break
                rec = {"n": n, "d": d, "b": batch, "h": heads, "dtype": "bfloat16",
                       "mask": mask, "case": label}

                def fwd(fn=fn):
                    with torch.no_grad():
                        fn()

                def fwd_bwd(fn=fn, qkv=(q, k, v), do=do):
                    for t in qkv:
                        t.grad = None
                    fn().backward(do)

                for what, f in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                    try:
                        rec[what] = _time(f, reps)
                    except Exception as exc:                 # recorded, not fatal
                        rec[what] = None
                        rec[f"{what} error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        torch.cuda.empty_cache()
                rows.append(rec)
                with out_jsonl.open("a") as fh:
                    fh.write(json.dumps(rec) + "\n")
                _log(json.dumps(rec))
            q = k = v = do = bms = None
            torch.cuda.empty_cache()
    return rows


def _ratios(rows):
    """Each row's ratio to SDPA flash of the same (N, D, mask), and window rows' to Flex."""
    by = {(r["n"], r["d"], r.get("mask"), r.get("case")): r for r in rows if "case" in r}
    for r in rows:
        if "case" not in r:
            continue
        flash = by.get((r["n"], r["d"], r["mask"], "sdpa flash")) or \
            by.get((r["n"], r["d"], r["mask"], "sdpa flash (dense)"))
        flex = by.get((r["n"], r["d"], r["mask"], "flex compiled"))
        for what in ("fwd", "fwd+bwd"):
            if r.get(what) and flash and flash.get(what):
                r[f"{what} / flash"] = r[what] / flash[what]
            if r.get(what) and flex and flex.get(what):
                r[f"{what} / flex"] = r[what] / flex[what]
    return rows


def _table(rows) -> list[str]:
    def ms(x):
        return "-" if x is None else f"{x:.3f}"

    def ratio(x):
        return "-" if x is None else f"{x:.2f}x"

    out = ["| N | D | mask | case | fwd ms | fwd / flash | fwd / flex | fwd+bwd ms | "
           "fwd+bwd / flash | fwd+bwd / flex |",
           "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted((r for r in rows if "case" in r), key=lambda r: (r["n"], r["d"], r["mask"])):
        err = r.get("fwd error") or r.get("fwd+bwd error")
        out.append(f"| {r['n']} | {r['d']} | {r['mask']} | {r['case']} | {ms(r.get('fwd'))} | "
                   f"{ratio(r.get('fwd / flash'))} | {ratio(r.get('fwd / flex'))} | "
                   f"{ms(r.get('fwd+bwd'))} | {ratio(r.get('fwd+bwd / flash'))} | "
                   f"{ratio(r.get('fwd+bwd / flex'))} |" + (f" error: {err[:80]}" if err else ""))
    out += [f"- N={r['n']} D={r['d']}: not measured ({r['skipped']})"
            for r in rows if "skipped" in r]
    return out


def auto_choices() -> list[str]:
    from attnlab import which_backend

    lines = ["| request (B=4, H=16, D=64, bf16) | N | auto picks |", "|---|---:|---|"]
    for n in (1024, 4096, 16384):
        q = torch.randn(4, 16, n, 64, device="cuda", dtype=torch.bfloat16)
        for label, kw in (("plain", {}), ("causal", {"causal": True}),
                          ("window 256", {"window": 256}), ("lse", {"return_lse": True}),
                          ("softcap 30, causal", {"softcap": 30.0, "causal": True})):
            lines.append(f"| {label} | {n} | {which_backend(q, q, q, **kw)} |")
    return lines


_COST_CASES = {"attnlab sdpa": "sdpa", "attnlab triton": "triton",
               "attnlab triton_blocksparse": "triton_blocksparse", "attnlab tiled": "tiled",
               "attnlab blocksparse": "blocksparse"}


def _kept(n: int, mask: str, window: int = 256) -> int:
    """Scores a kernel computes at length n: all, the lower triangle, or the +-window band."""
    if mask == "dense":
        return n * n
    if mask == "causal":
        return n * (n + 1) // 2
    return sum(min(i + window, n - 1) - max(i - window, 0) + 1 for i in range(n))


def cost_table(jsonl: Path) -> str:
    """The ``RATES`` literal of ``cuda_cost.py`` from a timing run: picoseconds per computed
    score, forward and forward + backward. SDPA through attnlab with a window builds a dense
    mask and computes every score: its row is the ``masked`` kind, per score of the grid."""
    rates: dict = {}
    for line in jsonl.read_text().splitlines():
        r = json.loads(line)
        name = _COST_CASES.get(r.get("case"))
        if name is None or not r.get("fwd") or not r.get("fwd+bwd"):
            continue
        kind = {"dense": "dense", "causal": "causal", "window 256": "window"}[r["mask"]]
        if name == "sdpa" and kind == "window":
            kind, kept = "masked", r["n"] * r["n"]
        else:
            kept = _kept(r["n"], r["mask"])
        per = r["b"] * r["h"] * kept
        rates.setdefault((name, kind), {}).setdefault(r["d"], {})[r["n"]] = (
            round(r["fwd"] * 1e9 / per, 3), round(r["fwd+bwd"] * 1e9 / per, 3))
    lines = ["RATES = {"]
    for key in sorted(rates):
        lines.append(f"    {key!r}: {{")
        lines += [f"        {d!r}: {rates[key][d]!r}," for d in sorted(rates[key])]
        lines.append("    },")
    return "\n".join(lines + ["}"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", nargs="+", default=["conformance", "dist", "timing"],
                   choices=["conformance", "dist", "timing"])
    p.add_argument("--sizes", type=int, nargs="+",
                   default=[1024, 4096, 16384, 32768, 2048, 8192])
    p.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=1e9,
                   help="seconds from the start after which no new timing starts")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/gpu")
    p.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    p.add_argument("--costs-from", type=Path, default=None,
                   help="print auto's CUDA cost table from a timings.jsonl and exit (any machine)")
    p.add_argument("--figure", type=Path, default=None,
                   help="draw the kernels' launch grids to this path and exit (any machine)")
    args = p.parse_args()
    if args.costs_from is not None:
        if not args.costs_from.is_file():
            print(f"gpu_check: --costs-from {args.costs_from}: no such file (a timings.jsonl "
                  "that --sections timing wrote)", file=sys.stderr)
            return 2
        print(cost_table(args.costs_from))
        return 0
    if args.figure is not None:
        from attnlab.plots.kernels import save_launch_grid

        save_launch_grid(args.figure)
        print(f"wrote {args.figure}")
        return 0
    if args.dry_run:
        print(f"sections {', '.join(args.sections)}")
        print(f"conformance: check_backend(device='cuda') on {', '.join(EXACT)}; "
              f"{', '.join(APPROX)} run once; {len(_tile_grid())} cases of triton and "
              "triton_blocksparse at their compiled tiles x 3 dtypes")
        print("dist: a one-rank NCCL group (ring, ulysses); simulate_ring on CUDA, P = 2, 3, 4")
        print(f"timing: bf16, B=4 H=16, N = {args.sizes}, D = {args.dims}; sdpa flash, sdpa "
              "cudnn, flex compiled, triton, triton_blocksparse (dense, causal, window 256)")
        return 0
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); run it on a GPU "
              "machine, or --dry-run", file=sys.stderr)
        return 2
    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    driver = os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read()
    head = [f"# GPU check: {props.name}", "",
            f"{props.name}, {props.multi_processor_count} SMs, "
            f"{props.total_memory / 2**30:.0f} GiB; driver {driver.strip() or '?'}; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, triton {triton.__version__}, "
            f"cuDNN {torch.backends.cudnn.version()}.",
            f"Command: `python scripts/gpu_check.py {' '.join(sys.argv[1:])}`", ""]
    failed = 0
    body: list[str] = []
    md = args.out / "gpu_check.md"

    def flush():
        md.write_text("\n".join(head + body) + "\n")

    if "conformance" in args.sections:
        lines, bad = conformance()
        failed += bad
        body += ["## Conformance: check_backend on CUDA", "", *lines, ""]
        flush()
        lines, bad = kernel_grid()
        failed += bad
        body += ["## Triton kernels at their compiled tiles (64 x 64), fwd + bwd", "", *lines, ""]
        flush()
    if "dist" in args.sections:
        try:
            lines, bad = dist_checks()
        except Exception as exc:
            traceback.print_exc()
            lines, bad = [f"crashed: {type(exc).__name__}: {exc}"], 1
        failed += bad
        body += ["## NCCL (one rank) and simulate_ring on CUDA", "", *lines, ""]
        flush()
    body += ["## auto on CUDA", "", *auto_choices(), ""]
    flush()
    if "timing" in args.sections:
        rows = _ratios(timings(args.sizes, args.dims, args.reps, args.budget,
                               args.out / "timings.jsonl"))
        body += [f"## Timing (B=4, H=16, bf16; median of {args.reps}; CUDA events)", "",
                 *_table(rows), ""]
        flush()
    print(md.read_text())
    _log(f"done, {failed} conformance failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
