"""The precision of the ring across world sizes, measured the one way the test and
``benchmarks/bench_distributed.py --precision`` both use."""

from __future__ import annotations

import torch


def ring_errors(dtype: torch.dtype, worlds, n: int = 512, logit_std: float = 9.0,
                causal: bool = True, seed: int = 0) -> dict:
    """Max absolute error of out, dq, dk, dv against float64 for the simulated ring
    (:func:`attnlab.distributed.simulate_ring`, zig-zag; B = 2, H = 4, H_kv = 2, D = 32;
    q.k/sqrt(d) of std ``logit_std``) in ``dtype`` at each world size in ``worlds``, and of the
    single-process reference in ``dtype`` (key ``"ref"``): ``{P: [out, dq, dk, dv]}``."""
    from attnlab import attention
    from attnlab.distributed import simulate_ring

    g = torch.Generator().manual_seed(seed)
    spread = logit_std ** 0.5
    q = torch.randn(2, 4, n, 32, generator=g, dtype=torch.float64) * spread
    k = torch.randn(2, 2, n, 32, generator=g, dtype=torch.float64) * spread
    v = torch.randn(2, 2, n, 32, generator=g, dtype=torch.float64)
    cot = torch.randn(2, 4, n, 32, generator=g, dtype=torch.float64)

    def run(dt, world):
        x = [t.to(dt).detach().requires_grad_(True) for t in (q, k, v)]
        if world is None:
            out = attention(*x, causal=causal, enable_gqa=True, backend="reference")
        else:
            out, _, _ = simulate_ring(*x, world, causal=causal, layout="zigzag")
        (out.double() * cot).sum().backward()
        return [out.detach().double()] + [t.grad.double() for t in x]

    gold = run(torch.float64, None)

    def errs(world):
        return [float((a - b).abs().max()) for a, b in zip(run(dtype, world), gold)]
    out = {w: errs(w) for w in worlds}
    out["ref"] = errs(None)
    return out
