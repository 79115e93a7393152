"""The census at long context: peak memory and time against a plain forward, on CPU.

    python benchmarks/bench_census.py                    # N = 4096 and 16384
    python benchmarks/bench_census.py --n 32768 --n 65536
    python benchmarks/bench_census.py --kernel           # attention_stats against the forward

A Llama-shaped transformers model built from a config (4 layers, 8 query heads, 2 K/V heads,
head dim 64, hidden 512, random weights), one sequence of random tokens, float32, no
gradients. Each (job, N) runs in a fresh process, so its peak resident memory (ru_maxrss) is
its own: ``forward`` (the model on ``attnlab_tiled``), ``census``
(:func:`attnlab.inspect.census`), ``report`` (the census with pooled maps and exact rows, as
``attnlab inspect`` takes it past 1,024 tokens, and its report written: the file's size).
Beside them, what dense maps would take: 4 bytes per weight, 8 heads x N^2 per layer.

``--kernel``: one layer's attention (B=1, 8 query heads, 2 K/V heads, D=64, causal, float32) at
N=4096, the plain tiled forward against ``attention_stats`` for the rows (with and without
token ids for prefix matching) and with the column sums; median of 5, two runs, the worse
kept. Results: Markdown tables on stdout and benchmarks/results/census.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "census.json"


def child(job: str, n: int) -> dict:
    import torch
    import transformers as tf

    from attnlab.inspect import census
    from attnlab.integrations import transformers as attnlab_hf

    attnlab_hf.register()
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         hidden_size=512, intermediate_size=1024, vocab_size=1000,
                         max_position_embeddings=n, attn_implementation="attnlab_tiled")
    model = tf.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 1000, (1, n))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    with torch.no_grad():
        if job == "forward":
            model(input_ids=ids, use_cache=False)
        elif job == "census":
            c = census(model, input_ids=ids)
        else:
            c = census(model, input_ids=ids, pooled=256, rows=[n - 1], sharpest=2)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"job": job, "n": n, "time_s": seconds, "peak_mib": peak, "base_mib": base}
    if job != "forward":
        out["labels"] = c.counts()
    if job == "report":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            t1 = time.perf_counter()
            path = c.save(Path(tmp) / "census.html")
            out["write_s"] = time.perf_counter() - t1
            out["report_mb"] = path.stat().st_size / 1e6
    return out


def kernel(runs: int = 2) -> dict:
    """Median-of-5 times at N=4096 of the plain tiled forward and of attention_stats; the
    worse of ``runs`` runs per ratio."""
    import torch

    from attnlab import attention
    from attnlab.core.stats import attention_stats

    torch.manual_seed(0)
    n = 4096
    q, k, v = torch.randn(1, 8, n, 64), torch.randn(1, 2, n, 64), torch.randn(1, 2, n, 64)
    ids = torch.randint(0, 1000, (n,))
    kw = dict(causal=True, enable_gqa=True)

    def median(f):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return sorted(times)[2]

    jobs = {"rows": lambda: attention_stats(q, k, columns=False, **kw),
            "rows + ids": lambda: attention_stats(q, k, columns=False, ids=ids, **kw),
            "rows + columns": lambda: attention_stats(q, k, **kw),
            "rows + columns + output": lambda: attention_stats(q, k, v, **kw)}
    worst: dict[str, float] = {}
    with torch.no_grad():
        for _ in range(runs):
            base = median(lambda: attention(q, k, v, backend="tiled", **kw))
            for name, f in jobs.items():
                worst[name] = max(worst.get(name, 0.0), median(f) / base)
    return {"n": n, "ratios": worst}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--kernel", action="store_true", help="attention_stats against the tiled "
                   "forward at N=4096 (no model)")
    p.add_argument("--jobs", nargs="+", default=["forward", "census", "report"],
                   choices=["forward", "census", "report"])
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    from attnlab.bench import machine

    if args.kernel:
        res = kernel()
        _store({"kernel": res})
        print(f"machine: {machine()}\n\n| statistics (N = {res['n']}) | time / tiled forward |")
        print("|---|---:|")
        for name, r in res["ratios"].items():
            print(f"| {name} | {r:.2f}x |")
        return 0

    rows = []
    for n in args.n or [4096, 16384]:
        for job in args.jobs:
            proc = subprocess.run([sys.executable, __file__, "--child", job, str(n)],
                                  capture_output=True, text=True, timeout=7200)
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0
                        else {"job": job, "n": n, "error": proc.stderr.strip()[-300:]})
            print(json.dumps(rows[-1]), flush=True)
    old = json.loads(RESULTS.read_text()).get("rows", []) if RESULTS.exists() else []
    done = {(x["n"], x["job"]) for x in rows}
    keep = [r for r in old if (r.get("n"), r.get("job")) not in done]
    _store({"rows": keep + rows})
    print(f"\nmachine: {machine()}\n")
    print("| N | forward s | census s | time ratio | forward peak MiB | census peak MiB | "
          "census - forward MiB | report s | report MB | dense maps per layer |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted({r["n"] for r in keep + rows}):
        f, c, rep = (next((r for r in keep + rows if r["n"] == n and r["job"] == job
                           and "error" not in r), None)
                     for job in ("forward", "census", "report"))
        if not f or not c:
            print(f"| {n} | failed or not run | | | | | | | | |")
            continue
        dense = 8 * n * n * 4 / 2**30
        report = (f"{rep['time_s']:.1f} | {rep['report_mb']:.1f}" if rep else "not run | ")
        print(f"| {n} | {f['time_s']:.1f} | {c['time_s']:.1f} | {c['time_s'] / f['time_s']:.2f}x "
              f"| {f['peak_mib']:.0f} | {c['peak_mib']:.0f} | {c['peak_mib'] - f['peak_mib']:.0f} "
              f"| {report} | {dense:.1f} GiB |")
    return 0


def _store(update: dict) -> None:
    """Merge ``update`` into the results file (temporary name, then rename)."""
    from attnlab.bench import machine

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data.update(update, machine=machine())
    tmp = RESULTS.with_name(RESULTS.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(RESULTS)


if __name__ == "__main__":
    sys.exit(main())
