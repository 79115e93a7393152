"""attnlab beside torch's FlexAttention on CPU, on the workloads flex takes: causal, a sliding
window, a document mask, ALiBi and a softcap.

    python benchmarks/bench_flex.py                # N = 4096
    python benchmarks/bench_flex.py --n 2048 8192

B=1, H=8, D=64, float32, 2 threads. Each workload runs three ways in one process, calls
alternating, each side's time the minimum over the rounds:

* flex: ``torch.compile(flex_attention)`` with the workload's ``BlockMask`` (built once, before
  timing) and ``score_mod``; compiled once before timing (compile time reported apart);
* attnlab, forward: ``attnlab.attention`` with the same workload in its own terms (``causal``,
  ``window``, ``masks.segments``, a ``score_mod``, ``softcap``), backend auto;
* attnlab, forward + backward. Flex's backward on CPU is tried and reported as it comes
  (torch 2.13 raises for it: the CPU flex kernel is forward-only).

Outputs are compared (flex against attnlab, max |difference|) before anything is timed.
Results: a Markdown table on stdout and benchmarks/results/flex.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results" / "flex.json"
B, H, D = 1, 8, 64
WINDOW, DOCS, CAP = 256, 4, 30.0


def workloads(n: int):
    """name -> (flex mask_mod or None, flex score_mod or None, attnlab keywords)."""
    from attnlab import masks
    from attnlab.nn.position import alibi_slopes

    slopes = alibi_slopes(H).float()          # the scores' dtype (float32)
    doc = torch.arange(n) * DOCS // n                        # 4 documents, packed

    def causal(b, h, q, k):
        return q >= k

    def window(b, h, q, k):
        return (q >= k) & (q - k <= WINDOW)

    def document(b, h, q, k):
        return (doc[q] == doc[k]) & (q >= k)

    def alibi(score, b, h, q, k):
        return score - slopes[h] * (q - k).abs()

    def softcap(score, b, h, q, k):
        return CAP * torch.tanh(score / CAP)

    return {
        "causal": (causal, None, {"causal": True}),
        f"sliding window {WINDOW} (causal)": (window, None, {"causal": True,
                                                             "window": (WINDOW, 0)}),
        f"document mask ({DOCS} documents, causal)": (
            document, None, {"causal": True, "mask": masks.segments(doc, doc)}),
        "ALiBi (score_mod)": (None, alibi, {"score_mod": alibi}),
        f"softcap {CAP:g}": (None, softcap, {"softcap": CAP}),
    }


def _best(f, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(n: int, rounds: int) -> list[dict]:
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D) for _ in range(3))
    rows = []
    for name, work in workloads(n).items():
        # A fresh compile per workload: one compiled function recompiled for each new mask or
        # score function hits dynamo's recompile limit and then runs flex eagerly, unfused.
        torch._dynamo.reset()
        flex = torch.compile(flex_attention, dynamic=False)
        rows.append(_one(n, name, work, (q, k, v), flex, rounds))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _one(n, name, work, qkv, flex, rounds) -> dict:
    from torch.nn.attention.flex_attention import create_block_mask

    from attnlab import attention, which_backend

    mask_mod, score_mod, ours = work
    q, k, v = qkv
    kw = {}
    if mask_mod is not None:
        kw["block_mask"] = create_block_mask(mask_mod, B, H, n, n, device="cpu")
    if score_mod is not None:
        kw["score_mod"] = score_mod
    t0 = time.perf_counter()
    with torch.no_grad():
        want = flex(q, k, v, **kw)
    compile_s = time.perf_counter() - t0
    with torch.no_grad():
        err = float((attention(q, k, v, **ours) - want).abs().max())
        t_flex = _best(lambda: flex(q, k, v, **kw), rounds)
        t_ours = _best(lambda: attention(q, k, v, **ours), rounds)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def ours_step():
        out = attention(qg, kg, vg, **ours)
        out.backward(torch.ones_like(out))
        qg.grad = kg.grad = vg.grad = None

    t_ours_bwd = _best(ours_step, rounds)
    try:
        out = flex(qg, kg, vg, **kw)
        out.backward(torch.ones_like(out))
        flex_bwd = "ran"
    except Exception as exc:                 # torch raises several types here
        flex_bwd = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return {"n": n, "workload": name, "backend": which_backend(q, k, v, **ours),
            "max_abs_diff": err, "flex_compile_s": compile_s, "flex_fwd_s": t_flex,
            "attnlab_fwd_s": t_ours, "ratio_fwd": t_ours / t_flex,
            "attnlab_fwd_bwd_s": t_ours_bwd, "flex_backward": flex_bwd}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[4096])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    from attnlab.bench import machine

    rows = [r for n in args.n for r in run(n, args.rounds)]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_name(RESULTS.name + ".tmp")
    tmp.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1) + "\n")
    tmp.replace(RESULTS)
    print(f"\nmachine: {machine()}\n")
    print("| N | workload | attnlab backend | flex fwd s | attnlab fwd s | attnlab / flex | "
          "attnlab fwd+bwd s | flex fwd+bwd | max abs diff |")
    print("|---:|---|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['n']} | {r['workload']} | {r['backend']} | {r['flex_fwd_s']:.3f} | "
              f"{r['attnlab_fwd_s']:.3f} | {r['ratio_fwd']:.2f}x | {r['attnlab_fwd_bwd_s']:.3f} "
              f"| {'runs' if r['flex_backward'] == 'ran' else 'refused'} | "
              f"{r['max_abs_diff']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
