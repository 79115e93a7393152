"""Cost of changing the scores: softcap and a score_mod bias on tiled (causal) and
blocksparse (sliding window), against the same call without them, SDPA with the equivalent
float mask, and compiled FlexAttention with the same score_mod (forward; it has no CPU
backward).

    python benchmarks/bench_scores.py                 # N = 1024, 4096, 16384
    python benchmarks/bench_scores.py --n 1024        # chosen sizes

B=1, H=8, D=64, float32. The score_mod is a relative-position bias shared by the heads,
``score + table[kv_idx - q_idx + N - 1]`` with a learnable ``table (2N - 1,)`` (its gradient is
part of fwd+bwd); the float mask is that bias materialized, ``(N, N)``, with -inf outside the
causal triangle or the window. Time: minimum over repeats after a warm-up, in this process.
Results: a Markdown table on stdout and JSON in benchmarks/results/scores.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab import attention
from attnlab.bench import machine

WINDOW = (256, 256)
CAP = 30.0
RESULTS = Path(__file__).parent / "results" / "scores.json"


def _keep(group: str, n: int) -> torch.Tensor:
    i = torch.arange(n)
    d = i[None, :] - i[:, None]                                      # key - query
    return d <= 0 if group == "causal" else (d >= -WINDOW[0]) & (d <= WINDOW[1])


def _cases(group: str, n: int, q, k, v, table):
    def rel(score, b, h, q_idx, kv_idx):
        return score + table[kv_idx - q_idx + n - 1]

    kw = {"causal": True} if group == "causal" else {"window": WINDOW}
    backend = "tiled" if group == "causal" else "blocksparse"
    yield "plain", lambda: attention(q, k, v, backend=backend, **kw)
    yield "softcap", lambda: attention(q, k, v, backend=backend, softcap=CAP, **kw)
    yield "score_mod", lambda: attention(q, k, v, backend=backend, score_mod=rel, **kw)
    if n <= 16384:
        i = torch.arange(n)
        bias = table.detach()[i[None, :] - i[:, None] + n - 1].masked_fill(~_keep(group, n),
                                                                           float("-inf"))
        yield "sdpa+float mask", lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias)


def _flex(group: str, n: int, q, k, v, table):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def rel(score, b, h, q_idx, kv_idx):
        return score + table[kv_idx - q_idx + n - 1]

    def keep(b, h, qi, ki):
        return (ki <= qi) if group == "causal" else (((ki - qi) >= -WINDOW[0])
                                                     & ((ki - qi) <= WINDOW[1]))

    t0 = time.perf_counter()
    block_mask = create_block_mask(keep, None, None, n, n, device="cpu")
    compiled = torch.compile(flex_attention)
    with torch.no_grad():
        compiled(q, k, v, score_mod=rel, block_mask=block_mask)
    return (lambda: compiled(q, k, v, score_mod=rel, block_mask=block_mask),
            time.perf_counter() - t0)


def _time(fn, backward: bool, repeats: int, grads) -> float:
    def step():
        out = fn()
        if backward:
            out.backward(torch.ones_like(out))
            for t in grads:
                t.grad = None
    step()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="sequence length (repeatable)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-flex", action="store_true", help="skip compiled FlexAttention")
    args = p.parse_args()
    sizes = args.n or [1024, 4096, 16384]
    rows = []
    for group in ("causal", "window"):
        for n in sizes:
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
            table = (0.1 * torch.randn(2 * n - 1)).requires_grad_()
            for mode in ("fwd", "fwd+bwd"):
                for name, fn in _cases(group, n, q, k, v, table):
                    with torch.set_grad_enabled(mode == "fwd+bwd"):
                        t = _time(fn, mode == "fwd+bwd", args.repeats, (q, k, v, table))
                    rows.append({"group": group, "n": n, "mode": mode, "method": name,
                                 "time_s": t})
                    print(json.dumps(rows[-1]), flush=True)
            if not args.no_flex:
                row = {"group": group, "n": n, "mode": "fwd", "method": "flex compiled"}
                try:
                    fn, setup = _flex(group, n, q.detach(), k.detach(), v.detach(),
                                      table.detach())
                    with torch.no_grad():
                        row.update(time_s=_time(fn, False, args.repeats, ()), setup_s=setup)
                except Exception as err:        # inductor's CPU codegen fails on some sizes
                    row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                rows.append(row)
                print(json.dumps(row), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    get = {(r["group"], r["n"], r["mode"], r["method"]): r["time_s"] for r in rows
           if "time_s" in r}
    methods = ["plain", "softcap", "score_mod", "sdpa+float mask", "flex compiled"]
    print("| mask | N | pass | " + " | ".join(methods) + " | score_mod / plain |")
    print("|---|---|---|" + "---|" * len(methods) + "---|")
    for group in ("causal", "window"):
        for mode in ("fwd", "fwd+bwd"):
            for n in sizes:
                cells = [f"{get[(group, n, mode, m)]:.3f}" if (group, n, mode, m) in get
                         else "failed" if any(r.get("error") and (r["group"], r["n"], r["mode"],
                                                                 r["method"]) == (group, n, mode, m)
                                              for r in rows) else "-" for m in methods]
                ratio = get[(group, n, mode, "score_mod")] / get[(group, n, mode, "plain")]
                label = "causal (tiled)" if group == "causal" else "window ±256 (blocksparse)"
                print(f"| {label} | {n} | {mode} | " + " | ".join(cells) + f" | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
