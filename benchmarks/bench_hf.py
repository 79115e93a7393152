"""A sliding-window Hugging Face model on attnlab's blocksparse against transformers' own sdpa
and eager attention: time and peak memory of one forward + backward, on CPU.

    python benchmarks/bench_hf.py                  # N = 4096 and 8192
    python benchmarks/bench_hf.py --n 2048 --n 4096

The model is Mistral-shaped and small (2 layers, hidden 256, 8 query heads of 32, 2 K/V heads,
sliding window 256, random weights), batch 1, float32. Each (implementation, N) runs in a fresh
process so that its peak memory is its own (resident memory above what the process held after
building the model and inputs, as attnlab.bench measures it). Results: a Markdown table on
stdout and benchmarks/results/hf.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

IMPLS = ("attnlab_blocksparse", "sdpa", "eager")
RESULTS = Path(__file__).parent / "results" / "hf.json"


def child(impl: str, n: int, repeats: int) -> dict:
    import torch
    import transformers as tf

    from attnlab.bench import time_and_peak
    from attnlab.integrations import transformers as attnlab_hf

    attnlab_hf.register()
    torch.manual_seed(0)
    cfg = tf.MistralConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                           num_attention_heads=8, num_key_value_heads=2, vocab_size=1000,
                           max_position_embeddings=n, sliding_window=256,
                           attn_implementation=impl)
    model = tf.MistralForCausalLM(cfg).train()
    ids = torch.randint(0, 1000, (1, n))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    seconds, peak = time_and_peak(step, repeats)
    return {"impl": impl, "n": n, "time_s": seconds, "peak_mib": peak}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        impl, n, repeats = args.child
        print(json.dumps(child(impl, int(n), int(repeats))))
        return 0
    from attnlab.bench import machine

    rows = []
    for n in args.n or [4096, 8192]:
        for impl in IMPLS:
            proc = subprocess.run([sys.executable, __file__, "--child", impl, str(n),
                                   str(args.repeats)], capture_output=True, text=True,
                                  timeout=3600)
            if proc.returncode != 0:
                rows.append({"impl": impl, "n": n, "error": proc.stderr.strip()[-300:]})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1) + "\n")
    print(f"\nmachine: {machine()}\n")
    print("| N | implementation | fwd+bwd s | peak MiB | time vs attnlab |")
    print("|---|---|---|---|---|")
    for n in sorted({r["n"] for r in rows}):
        ours = next((r for r in rows if r["n"] == n and r["impl"] == IMPLS[0]
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
