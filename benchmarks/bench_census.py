"""The census at long context: peak memory and time against a plain forward, on CPU.

    python benchmarks/bench_census.py                    # N = 4096 and 16384
    python benchmarks/bench_census.py --n 32768

A Llama-shaped transformers model built from a config (4 layers, 8 query heads, 2 K/V heads,
head dim 64, hidden 512, random weights), one sequence of random tokens, float32, no
gradients. Each (job, N) runs in a fresh process, so its peak resident memory (ru_maxrss) is
its own: ``forward`` (the model on ``attnlab_tiled``), ``census``
(:func:`attnlab.inspect.census`). Beside them, what dense maps would take: 4 bytes per weight,
8 heads x N^2 per layer. Results: a Markdown table on stdout and
benchmarks/results/census.json.
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
        else:
            c = census(model, input_ids=ids)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"job": job, "n": n, "time_s": seconds, "peak_mib": peak, "base_mib": base}
    if job == "census":
        out["labels"] = c.counts()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    from attnlab.bench import machine

    rows = []
    for n in args.n or [4096, 16384]:
        for job in ("forward", "census"):
            proc = subprocess.run([sys.executable, __file__, "--child", job, str(n)],
                                  capture_output=True, text=True, timeout=7200)
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0
                        else {"job": job, "n": n, "error": proc.stderr.strip()[-300:]})
            print(json.dumps(rows[-1]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []
    keep = [r for r in old if r.get("n") not in {x["n"] for x in rows}]
    tmp = RESULTS.with_name(RESULTS.name + ".tmp")
    tmp.write_text(json.dumps({"machine": machine(), "rows": keep + rows}, indent=1) + "\n")
    tmp.replace(RESULTS)
    print(f"\nmachine: {machine()}\n")
    print("| N | forward s | census s | time ratio | forward peak MiB | census peak MiB | "
          "census - forward MiB | dense maps per layer |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted({r["n"] for r in keep + rows}):
        f = next((r for r in keep + rows if r["n"] == n and r["job"] == "forward"), None)
        c = next((r for r in keep + rows if r["n"] == n and r["job"] == "census"), None)
        if not f or not c or "error" in f or "error" in c:
            print(f"| {n} | failed | | | | | | |")
            continue
        dense = 8 * n * n * 4 / 2**30
        print(f"| {n} | {f['time_s']:.1f} | {c['time_s']:.1f} | {c['time_s'] / f['time_s']:.2f}x "
              f"| {f['peak_mib']:.0f} | {c['peak_mib']:.0f} | {c['peak_mib'] - f['peak_mib']:.0f} "
              f"| {dense:.1f} GiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
