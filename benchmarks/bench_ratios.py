"""The hot paths as ratios to their peers, measured in one process, and compared with the ratios
recorded in docs/benchmarks.md.

    python benchmarks/bench_ratios.py            # measure and print the ratios
    python benchmarks/bench_ratios.py --check    # also compare with docs/benchmarks.md; exit 1
                                                 # when a ratio is worse than recorded by > --slack
    python benchmarks/bench_ratios.py --only alibi census   # the rows whose name has a word

The ratios (B=1, H=8, D=64, float32):

* ``tiled / sdpa, N=4096, fwd`` and ``fwd+bwd``: the flash-style tiled backend against
  PyTorch's fused SDPA, dense attention (lower is better; 1.0 = as fast as SDPA);
* ``sdpa+mask / blocksparse, N=16384, window 256, fwd`` and ``fwd+bwd``: SDPA with the
  equivalent dense bool mask (built before timing) against blocksparse's band path (higher is
  better), at N=16384 and, forward only, N=32768, with its fraction of the FLOP ceiling
  (``N / (2w + 1)``, the keys SDPA scores per key the band keeps);
* ``alibi score_mod / plain, tiled, N=4096, fwd``: an ALiBi ``score_mod`` (a slope per head
  times the distance, float64 slopes as :func:`attnlab.nn.position.alibi_slopes` gives them)
  against the same call without it, and ``softcap 30 / plain``: Gemma 2's softcap of 30
  against the same call without it (lower is better). Both run on the compiled tile loop
  (:mod:`attnlab.core.engine.compiled.loop`): ALiBi as a bias per diagonal
  (:mod:`attnlab.core.engine.modifiers.diagonal`), the softcap in the loop's score pass;
* ``stats rows / tiled, N=4096`` and ``stats rows+columns / tiled, N=4096``: the census's
  statistics (:func:`attnlab.attention_stats`, causal, 2 K/V heads) against a causal tiled
  forward (lower is better).

Calls of the two sides alternate, and each side's time is the minimum over the rounds, so a
load that comes and goes on a shared machine hits both alike. Ratios, not seconds, are what
stay comparable between machines and days.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

from attnlab import attention
from attnlab.bench import machine

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
B, H, D = 1, 8, 64
WINDOW = 256
# name -> (higher is better?)
RATIOS = {
    "tiled / sdpa, N=4096, fwd": False,
    "tiled / sdpa, N=4096, fwd+bwd": False,
    "sdpa+mask / blocksparse, N=16384, window 256, fwd": True,
    "sdpa+mask / blocksparse, N=16384, window 256, fwd+bwd": True,
    "sdpa+mask / blocksparse, N=32768, window 256, fwd": True,
    "alibi score_mod / plain, tiled, N=4096, fwd": False,
    "softcap 30 / plain, tiled, N=4096, fwd": False,
    "stats rows / tiled, N=4096": False,
    "stats rows+columns / tiled, N=4096": False,
}


def ceiling(n: int, window: int = WINDOW) -> float:
    """The band's FLOP ceiling: dense SDPA scores n keys per query, the band 2w + 1."""
    return n / (2 * window + 1)


def _step(fn, q, k, v, backward):
    def run():
        out = fn(q, k, v)
        if backward:
            out.backward(torch.ones_like(out))
            q.grad = k.grad = v.grad = None
    return run


def _pair(n, backward, a, b, rounds):
    """min seconds of a and of b, calls alternating."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, requires_grad=backward) for _ in range(3))
    fa, fb = _step(a, q, k, v, backward), _step(b, q, k, v, backward)
    fa(), fb()                                          # warm-up
    ta, tb = [], []
    for _ in range(rounds):
        for f, t in ((fa, ta), (fb, tb)):
            start = time.perf_counter()
            f()
            t.append(time.perf_counter() - start)
    return min(ta), min(tb)


def measure(rounds: int = 5, only: list[str] | None = None) -> dict[str, float]:
    def wanted(name):
        return not only or any(word in name for word in only)

    out = {}
    for backward, mode in ((False, "fwd"), (True, "fwd+bwd")):
        name = f"tiled / sdpa, N=4096, {mode}"
        if wanted(name):
            t_tiled, t_sdpa = _pair(4096, backward,
                                    lambda q, k, v: attention(q, k, v, backend="tiled"),
                                    lambda q, k, v: attention(q, k, v, backend="sdpa"), rounds)
            out[name] = t_tiled / t_sdpa
    for n, modes in ((16384, ((False, "fwd"), (True, "fwd+bwd"))), (32768, ((False, "fwd"),))):
        names = [f"sdpa+mask / blocksparse, N={n}, window {WINDOW}, {m}" for _, m in modes]
        if not any(wanted(x) for x in names):
            continue
        i = torch.arange(n)
        dense = (i[None, :] - i[:, None]).abs() <= WINDOW          # (N, N) bool, built once
        for (backward, _), name in zip(modes, names):
            t_sdpa, t_bs = _pair(
                n, backward,
                lambda q, k, v, dense=dense: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=dense),
                lambda q, k, v: attention(q, k, v, window=(WINDOW, WINDOW),
                                          backend="blocksparse"),
                max(2, rounds // 2))
            out[name] = t_sdpa / t_bs
        del dense
    name = "alibi score_mod / plain, tiled, N=4096, fwd"
    if wanted(name):
        from attnlab.nn.position import alibi_slopes

        slopes = alibi_slopes(H)

        def alibi(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx).abs()

        t_mod, t_plain = _pair(4096, False,
                               lambda q, k, v: attention(q, k, v, score_mod=alibi,
                                                         backend="tiled"),
                               lambda q, k, v: attention(q, k, v, backend="tiled"), rounds)
        out[name] = t_mod / t_plain
    name = "softcap 30 / plain, tiled, N=4096, fwd"
    if wanted(name):
        t_cap, t_plain = _pair(4096, False,
                               lambda q, k, v: attention(q, k, v, softcap=30.0, backend="tiled"),
                               lambda q, k, v: attention(q, k, v, backend="tiled"), rounds)
        out[name] = t_cap / t_plain
    for name, columns in (("stats rows / tiled, N=4096", False),
                          ("stats rows+columns / tiled, N=4096", True)):
        if wanted(name):
            out[name] = _stats_ratio(columns, rounds)
    return out


def _stats_ratio(columns: bool, rounds: int) -> float:
    from attnlab.core.stats import attention_stats

    torch.manual_seed(0)
    n = 4096
    q, k, v = torch.randn(1, H, n, D), torch.randn(1, 2, n, D), torch.randn(1, 2, n, D)
    ta, tb = [], []
    with torch.no_grad():
        for _ in range(rounds + 1):
            for f, t in ((lambda: attention_stats(q, k, causal=True, enable_gqa=True,
                                                  columns=columns), ta),
                         (lambda: attention(q, k, v, causal=True, enable_gqa=True,
                                            backend="tiled"), tb)):
                start = time.perf_counter()
                f()
                t.append(time.perf_counter() - start)
    return min(ta[1:]) / min(tb[1:])


def recorded(doc: Path = DOC) -> dict[str, float]:
    """The ratios of the table under '## Hot-path ratios' in docs/benchmarks.md."""
    text = doc.read_text(encoding="utf-8")
    part = text.split("## Hot-path ratios", 1)[-1].split("\n## ", 1)[0]
    found = {}
    for line in part.splitlines():
        m = re.match(r"\|\s*(.+?)\s*\|\s*([0-9.]+)x?\s*\|", line)
        if m and m.group(1) in RATIOS:
            found[m.group(1)] = float(m.group(2))
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="compare with the ratios recorded in docs/benchmarks.md")
    p.add_argument("--slack", type=float, default=0.10,
                   help="allowed relative worsening before --check fails (default 0.10)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", nargs="+", help="measure only the rows whose name holds a word")
    args = p.parse_args(argv)
    print(f"machine: {machine()}")
    got = measure(args.rounds, args.only)
    was = recorded() if args.check else {}
    worse = []
    for name, value in got.items():
        line = f"{name}: {value:.2f}x"
        m = re.search(r"N=(\d+), window", name)
        if m:
            line += f" ({value / ceiling(int(m.group(1))):.0%} of the FLOP ceiling)"
        if name in was:
            higher = RATIOS[name]
            change = value / was[name] if higher else was[name] / value
            verdict = "ok" if change >= 1 - args.slack else "WORSE"
            line += f"  (recorded {was[name]:.2f}x: {verdict})"
            if change < 1 - args.slack:
                worse.append(name)
        print(line)
    if args.check and not was:
        print("no '## Hot-path ratios' table in docs/benchmarks.md", file=sys.stderr)
        return 1
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
