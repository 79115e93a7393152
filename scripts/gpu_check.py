"""The GPU check of the Triton kernels, in one command: correctness of every backend on CUDA,
then timings of the kernels against SDPA's flash kernel and compiled FlexAttention.

    python scripts/gpu_check.py                      # on a CUDA machine; about 5-8 minutes
    python scripts/gpu_check.py --sizes 1024 4096    # fewer lengths
    python scripts/gpu_check.py --dry-run            # what it would run (any machine)
    python scripts/gpu_check.py --figure docs/img/triton_grid.png   # the launch grids (any)

1. Correctness: :func:`attnlab.testing.check_backend` with ``device="cuda"`` on every exact
   backend (reference, sdpa, tiled, blocksparse, triton, triton_blocksparse): outputs, lse and
   dQ, dK, dV against the float64 reference with the rule every backend is held to; the
   approximations run once (shape and finiteness); which backend ``auto`` picks on CUDA.
2. Timing (CUDA events, median of ``--reps`` after warm-up), B=1, H=16, D=64, fp16 and bf16,
   forward and forward+backward, for each N of ``--sizes`` (default 1k to 32k):
   dense: ``triton`` vs SDPA restricted to its flash kernel vs compiled ``flex_attention``;
   window +-256: ``triton`` (band), ``triton_blocksparse``, compiled FlexAttention with a block
   mask, against dense flash. Ratios are to SDPA flash in the same row.

Writes ``--out`` (markdown, default benchmarks/results/gpu_check.md) and a JSON twin, and
prints both. Targets (issue): triton forward <= 1.25x flash, forward+backward <= 1.5x;
block-sparse +-256 at N = 32768 >= 8x faster than dense flash.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EXACT = ("reference", "sdpa", "tiled", "blocksparse", "triton", "triton_blocksparse")
APPROX = ("performer", "linear", "lsh")


def correctness(device: str) -> tuple[list[str], int]:
    from attnlab import attention, list_backends, which_backend
    from attnlab.testing import check_backend

    lines, failed = ["| backend | cases passed | skipped | failed | seconds |",
                     "|---|---:|---:|---:|---:|"], 0
    for name in EXACT:
        dtypes = [d for d in (torch.float64, torch.float32, torch.bfloat16, torch.float16)
                  if d in list_backends()[name].capabilities.dtypes]
        t0 = time.perf_counter()
        rep = check_backend(name, device=device, dtypes=dtypes)
        skipped = sum(r.skipped for r in rep.results)
        bad = len(rep.failures)
        failed += bad
        lines.append(f"| {name} | {len(rep.results) - skipped - bad} | {skipped} | {bad} | "
                     f"{time.perf_counter() - t0:.0f} |")
        for r in rep.failures:
            print(f"FAIL {name} {r.case} [{r.dtype}]: {r.detail} ({r.smallest})")
    q, k, v = (torch.randn(2, 4, 300, 32, device=device) for _ in range(3))
    for name in APPROX:
        out = attention(q, k, v, backend=name)
        ok = out.shape == q.shape and bool(torch.isfinite(out).all())
        failed += not ok
        lines.append(f"| {name} (approximate: runs) | {int(ok)} | 0 | {int(not ok)} | - |")
    lines.append("")
    lines.append("auto on CUDA: " + "; ".join(
        f"{label} -> {which_backend(q.half(), k.half(), v.half(), **kw)}" for label, kw in (
            ("plain", {}), ("causal", {"causal": True}), ("window 64", {"window": 64}),
            ("lse", {"return_lse": True}), ("softcap", {"softcap": 30.0}))))
    return lines, failed


def _time(fn, reps: int) -> float:
    """Median milliseconds of ``fn()`` on the current stream."""
    for _ in range(3):
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



def _cases(q, k, v, bm, flex) -> dict:
    """The timed calls on one (q, k, v): SDPA flash, Triton, compiled Flex, dense and windowed."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnlab import attention

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    return {
        "sdpa flash (dense)": flash,
        "triton (dense)": lambda: attention(q, k, v, backend="triton"),
        "flex compiled (dense)": lambda: flex(q, k, v),
        "triton window 256": lambda: attention(q, k, v, window=256, backend="triton"),
        "triton_blocksparse window 256":
            lambda: attention(q, k, v, window=256, backend="triton_blocksparse"),
        "flex compiled window 256": lambda: flex(q, k, v, block_mask=bm),
    }


def _passes(fn, q, k, v, do):
    """The forward alone (no autograd) and forward + backward of one call."""
    def fwd():
        with torch.no_grad():
            fn()

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        fn().backward(do)

    return fwd, fwd_bwd

def timings(sizes: list[int], reps: int, heads: int, dim: int) -> list[dict]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention


    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for n in sizes:
            q, k, v = (torch.randn(1, heads, n, dim, device="cuda", dtype=dtype,
                                   requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)

            def window_mod(b, h, qi, ki):
                return (qi - ki).abs() <= 256

            bm = create_block_mask(window_mod, None, None, n, n, device="cuda")
            base = {}
            for label, fn in _cases(q, k, v, bm, flex).items():
                fwd, fwd_bwd = _passes(fn, q, k, v, do)
                rec = {"dtype": str(dtype).removeprefix("torch."), "n": n, "case": label}
                for what, f in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                    try:
                        rec[what] = _time(f, reps)
                    except Exception as exc:                 # recorded, not fatal
                        rec[what] = None
                        rec[f"{what} error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                if label.startswith("sdpa flash"):
                    base = rec
                for what in ("fwd", "fwd+bwd"):
                    if rec.get(what) and base.get(what):
                        rec[f"{what} / flash"] = rec[what] / base[what]
                rows.append(rec)
                print(json.dumps(rec), flush=True)
            q = k = v = do = None          # free the inputs before the next length
            torch.cuda.empty_cache()
    return rows


def _table(rows: list[dict]) -> list[str]:
    def ms(x):
        return "-" if x is None else f"{x:.3f}"

    def ratio(x):
        return "-" if x is None else f"{x:.2f}x"

    out = ["| dtype | N | case | fwd ms | fwd / flash | fwd+bwd ms | fwd+bwd / flash |",
           "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['dtype']} | {r['n']} | {r['case']} | {ms(r.get('fwd'))} | "
                   f"{ratio(r.get('fwd / flash'))} | {ms(r.get('fwd+bwd'))} | "
                   f"{ratio(r.get('fwd+bwd / flash'))} |")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+",
                   default=[1024, 2048, 4096, 8192, 16384, 32768])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--skip-correctness", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/gpu_check.md")
    p.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    p.add_argument("--figure", type=Path, default=None,
                   help="draw the kernels' launch grids to this path and exit (no GPU needed)")
    args = p.parse_args()
    if args.figure is not None:
        from attnlab.plots.kernels import save_launch_grid

        save_launch_grid(args.figure)
        print(f"wrote {args.figure}")
        return 0
    if args.dry_run:
        print(f"correctness: check_backend(device='cuda') on {', '.join(EXACT)}; "
              f"{', '.join(APPROX)} run once")
        print(f"timing: fp16, bf16; N = {args.sizes}; B=1 H={args.heads} D={args.dim}; "
              "sdpa flash, triton, flex compiled (dense and window 256), triton_blocksparse")
        return 0
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); run it on a GPU "
              "machine, or --dry-run", file=sys.stderr)
        return 2
    import triton

    head = [f"# GPU check: {torch.cuda.get_device_name()}", "",
            f"torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}."
            f" Command: `python scripts/gpu_check.py {' '.join(sys.argv[1:])}`", ""]
    failed = 0
    body: list[str] = []
    if not args.skip_correctness:
        lines, failed = correctness("cuda")
        body += ["## Correctness (float64 reference, relative rule)", "", *lines, ""]
    rows = timings(args.sizes, args.reps, args.heads, args.dim)
    body += [f"## Timing (B=1, H={args.heads}, D={args.dim}; median of {args.reps})", "",
             *_table(rows), ""]
    text = "\n".join(head + body)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for path, content in ((args.out, text), (args.out.with_suffix(".json"),
                                            json.dumps(rows, indent=1) + "\n")):
        tmp = path.with_name(path.name + ".tmp")              # written whole, then renamed
        tmp.write_text(content)
        tmp.replace(path)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
