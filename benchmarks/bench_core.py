"""Time and peak memory of the exact backends against SDPA and a naive written-out attention.

    python benchmarks/bench_core.py                     # B=1, H=8, D=64, fp32, N = 512 .. 16384
    python benchmarks/bench_core.py --n 512 --n 1024    # chosen sizes
    python benchmarks/bench_core.py --quick             # N = 512, 1024 only

Every (method, N, pass) runs in a fresh subprocess so that peak memory is its own: the child
returns freed heap pages to the kernel (malloc_trim), resets the kernel's high-water mark
(/proc/self/clear_refs), runs once more, and reports ``VmHWM - VmRSS before the call`` as the
extra peak memory: resident bytes, so it counts what torch's CPU allocator really touched,
beyond the inputs. Linux only. Time is the minimum over repeats after one warm-up.
Results: a table on the terminal, JSON in benchmarks/results/core.json, and a Markdown table
(--markdown) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from attnlab.bench import machine, time_and_peak

METHODS = ["naive", "reference", "sdpa", "tiled"]
# Methods that hold N x N matrices: skip sizes whose scores alone would not fit comfortably.
DENSE = {"naive", "reference"}
DENSE_MAX_N = {"fwd": 8192, "fwd+bwd": 4096}
RESULTS = Path(__file__).parent / "results" / "core.json"


def child(method: str, n: int, mode: str, repeats: int, b: int, h: int, d: int) -> dict:
    import torch

    from attnlab import attention

    torch.manual_seed(0)
    grad = mode == "fwd+bwd"
    q, k, v = (torch.randn(b, h, n, d, requires_grad=grad) for _ in range(3))
    cot = torch.randn(b, h, n, d)

    def naive():
        # The formula as most people first write it.
        a = torch.softmax(q @ k.transpose(-2, -1) / d ** 0.5, dim=-1)
        return a @ v

    def step():
        out = naive() if method == "naive" else attention(q, k, v, backend=method)
        if grad:
            out.backward(cot)
            q.grad = k.grad = v.grad = None
        return out

    seconds, peak_mib = time_and_peak(step, repeats)
    return {"method": method, "n": n, "mode": mode, "time_s": seconds, "peak_mib": peak_mib}


def run_one(method, n, mode, repeats, b, h, d):
    cmd = [sys.executable, __file__, "--child", method, str(n), mode, str(repeats), str(b), str(h),
           str(d)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"method": method, "n": n, "mode": mode, "error": proc.stderr.strip()[-300:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratios(rows: list[dict], mode: str, n: int, num: str, den: str) -> float | None:
    get = {(r["method"], r["n"], r["mode"]): r for r in rows if "time_s" in r}
    a, b = get.get((num, n, mode)), get.get((den, n, mode))
    return a["time_s"] / b["time_s"] if a and b else None


def markdown(rows: list[dict], sizes: list[int], info: dict, cmd: str) -> str:
    get = {(r["method"], r["n"], r["mode"]): r for r in rows}
    lines = [f"Command: `{cmd}`", "",
             f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} "
             f"({info['torch_threads']} threads, {info['capability']}), Python {info['python']}.",
             "", "| pass | N | " + " | ".join(f"{m} time (s) / extra peak (MiB)" for m in METHODS)
             + " | tiled / sdpa time |", "|" + "---|" * (len(METHODS) + 3)]
    for mode in ("fwd", "fwd+bwd"):
        for n in sizes:
            cells = []
            for m in METHODS:
                r = get.get((m, n, mode))
                if r is None or "skipped" in r:
                    cells.append("skipped" if r is None else r["skipped"])
                elif "error" in r:
                    cells.append("error")
                else:
                    cells.append(f"{r['time_s']:.3f} / {r['peak_mib']:.0f}")
            ratio = ratios(rows, mode, n, "tiled", "sdpa")
            lines.append(f"| {mode} | {n} | " + " | ".join(cells) +
                         f" | {'' if ratio is None else f'{ratio:.2f}x'} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        method, n, mode, repeats, b, h, d = sys.argv[2:9]
        print(json.dumps(child(method, int(n), mode, int(repeats), int(b), int(h), int(d))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    p.add_argument("--quick", action="store_true", help="N = 512 and 1024 only")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--markdown", action="store_true", help="print a Markdown table at the end")
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    args = p.parse_args()
    sizes = args.n or ([512, 1024] if args.quick else [512, 1024, 2048, 4096, 8192, 16384])

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console()
    jobs = [(m, n, mode) for mode in ("fwd", "fwd+bwd") for n in sizes for m in METHODS]
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(jobs))
        for m, n, mode in jobs:
            progress.update(task, description=f"{mode} {m} N={n}")
            if m in DENSE and n > DENSE_MAX_N[mode]:
                gib = args.batch * args.heads * n * n * 4 / 2**30
                rows.append({"method": m, "n": n, "mode": mode,
                             "skipped": f"skipped ({gib:.0f} GiB per N x N matrix)"})
            else:
                repeats = 3 if n <= 4096 else 2
                rows.append(run_one(m, n, mode, repeats, args.batch, args.heads, args.dim))
            progress.advance(task)

    info = machine()
    table = Table(title=f"B={args.batch} H={args.heads} D={args.dim} fp32: time s / extra peak MiB")
    table.add_column("pass")
    table.add_column("N", justify="right")
    for m in METHODS:
        table.add_column(m, justify="right")
    table.add_column("tiled/sdpa", justify="right")
    get = {(r["method"], r["n"], r["mode"]): r for r in rows}
    for mode in ("fwd", "fwd+bwd"):
        for n in sizes:
            cells = []
            for m in METHODS:
                r = get[(m, n, mode)]
                cells.append("-" if "skipped" in r else "error" if "error" in r
                             else f"{r['time_s']:.3f} / {r['peak_mib']:.0f}")
            ratio = ratios(rows, mode, n, "tiled", "sdpa")
            table.add_row(mode, str(n), *cells, "" if ratio is None else f"{ratio:.2f}x")
    console.print(table)
    for r in rows:
        if "error" in r:
            console.print(f"[red]{r['method']} N={r['n']} {r['mode']} failed:[/red] {r['error']}")

    cmd = "python benchmarks/bench_core.py " + " ".join(sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"machine": info, "command": cmd.strip(), "batch": args.batch,
                               "heads": args.heads, "dim": args.dim, "results": rows}, indent=1))
    os.replace(tmp, args.out)
    console.print(f"results written to {args.out}")
    if args.markdown:
        print(markdown(rows, sizes, info, cmd.strip()))


if __name__ == "__main__":
    main()
