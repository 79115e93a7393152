"""Hugging Face models on attnlab's names against transformers' own sdpa and eager attention:
time and peak memory of one forward + backward, on CPU.

    python benchmarks/bench_hf.py                  # window: N = 4096 and 8192
    python benchmarks/bench_hf.py --n 2048 --n 4096
    python benchmarks/bench_hf.py --dense          # dense (Llama-shaped), N = 4096

Window: a Mistral-shaped model (2 layers, hidden 256, 8 query heads of 32, 2 K/V heads,
sliding window 256, random weights) on ``attnlab_blocksparse``. Dense: the same shape as a
Llama (no window) on ``attnlab`` (auto) and ``attnlab_tiled``. Batch 1, float32. Each
(implementation, N) runs in a fresh process so that its peak memory is its own (resident
memory above what the process held after building the model and inputs, as attnlab.bench
measures it). Results: a Markdown table on stdout and benchmarks/results/hf.json
(hf_dense.json for --dense).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

IMPLS = {"window": ("attnlab_blocksparse", "sdpa", "eager"),
         "dense": ("attnlab", "sdpa", "attnlab_tiled", "eager")}
RESULTS = Path(__file__).parent / "results" / "hf.json"


def child(impl: str, n: int, repeats: int, shape: str) -> dict:
    import torch
    import transformers as tf

    from attnlab.bench import time_and_peak
    from attnlab.integrations import transformers as attnlab_hf

    attnlab_hf.register()
    torch.manual_seed(0)
    common = dict(num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=1000,
                  max_position_embeddings=n, attn_implementation=impl)
    if shape == "window":
        model = tf.MistralForCausalLM(tf.MistralConfig(sliding_window=256, **common))
    else:
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    model.train()
    ids = torch.randint(0, 1000, (1, n))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    seconds, peak = time_and_peak(step, repeats)
    return {"impl": impl, "n": n, "shape": shape, "time_s": seconds, "peak_mib": peak}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--dense", action="store_true",
                   help="the dense (Llama-shaped) model instead of the sliding-window one")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        impl, n, repeats, shape = args.child
        print(json.dumps(child(impl, int(n), int(repeats), shape)))
        return 0
    from attnlab.bench import machine

    shape = "dense" if args.dense else "window"
    impls = IMPLS[shape]
    rows = []
    for n in args.n or ([4096] if args.dense else [4096, 8192]):
        for impl in impls:
            proc = subprocess.run([sys.executable, __file__, "--child", impl, str(n),
                                   str(args.repeats), shape], capture_output=True, text=True,
                                  timeout=3600)
            if proc.returncode != 0:
                rows.append({"impl": impl, "n": n, "error": proc.stderr.strip()[-300:]})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    out = RESULTS if shape == "window" else RESULTS.with_name("hf_dense.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1) + "\n")
    tmp.replace(out)
    print(f"\nmachine: {machine()}\n")
    print("| N | implementation | fwd+bwd s | peak MiB | time vs attnlab |")
    print("|---|---|---|---|---|")
    for n in sorted({r["n"] for r in rows}):
        ours = next((r for r in rows if r["n"] == n and r["impl"] == impls[0]
                     and "time_s" in r), None)
        for r in (r for r in rows if r["n"] == n):
            if "error" in r:
                print(f"| {n} | {r['impl']} | failed | | |")
                continue
            ratio = f"{r['time_s'] / ours['time_s']:.1f}x" if ours else "-"
            print(f"| {n} | {r['impl']} | {r['time_s']:.2f} | {r['peak_mib']:.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
