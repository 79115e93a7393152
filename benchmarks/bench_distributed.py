"""Ring attention across P processes on one machine: peak memory per rank, bytes sent against
the ring's volume, how much communication the compute hides, and PyTorch's context_parallel.

    python benchmarks/bench_distributed.py                 # N = 65536, P = 1, 2, 4
    python benchmarks/bench_distributed.py --n 8192 --out /tmp/d.json
    python benchmarks/bench_distributed.py --figure docs/img/distributed_zigzag.png

Each rank builds only its own shard (B=1, H=2, D=64, float32, causal, zig-zag layout) and runs
forward + backward once, after a warm-up call at 2048 tokens per rank. Memory is the process's
peak resident set above what it held after the warm-up and building its inputs, with glibc
told to map every allocation over 128 KiB on its own (MALLOC_MMAP_THRESHOLD_, set for the
ranks by this script) so that freed tensors leave the resident set. Bytes on the wire are read
from the loopback interface's counters
(/proc/net/dev) around the call, all ranks together, divided by P; the ring's volume per rank is
(P - 1) K/V shards forward, (P - 1) K/V shards plus P float64 dK/dV shards backward.

On a 2-core machine the ranks share the cores, so the time does not fall with P: this shows
memory and volume, not speed-up (docs/benchmarks.md says what would).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time

import torch

from attnlab.distributed import local_positions, ring_attention, spawn


def _lo_bytes() -> int:
    try:
        for line in open("/proc/net/dev"):
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])           # transmitted bytes
    except OSError:
        pass
    return -1


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rank_job(rank: int, world: int, n: int, heads: int, d: int, overlap: bool = True):
    import torch.distributed as dist
    torch.manual_seed(rank)
    # warm-up at a small size: one-time allocations (gloo buffers, thread pools) stay out
    small = local_positions(2048 * world, layout="zigzag").numel()
    w = [torch.randn(1, heads, small, d, requires_grad=True) for _ in range(3)]
    ring_attention(*w, causal=True, layout="zigzag", timeout=3600).sum().backward()
    del w
    pos = local_positions(n, layout="zigzag")
    q, k, v = (torch.randn(1, heads, pos.numel(), d, requires_grad=True) for _ in range(3))
    dist.barrier()
    base, lo0, t0 = _rss_mb(), _lo_bytes(), time.perf_counter()
    stats: dict = {}
    out = ring_attention(q, k, v, causal=True, layout="zigzag", stats=stats, timeout=3600,
                         overlap=overlap)
    t1 = time.perf_counter()
    out.sum().backward()
    t2 = time.perf_counter()
    dist.barrier()
    lo1 = _lo_bytes()
    # the same ring volume with no compute: what the waits would cost if nothing overlapped
    comm_alone = _ring_only(k, v, world, stats["steps"])
    return {"rank": rank, "rss_base_mb": base, "rss_peak_mb": _rss_mb(),
            "inputs_mb": 3 * q.numel() * 4 / 2**20, "forward_s": t1 - t0, "backward_s": t2 - t1,
            "sent_bytes": stats["sent_bytes"], "backward_sent_bytes": stats["backward_sent_bytes"],
            "wait_s": stats["wait_s"] + stats["backward_wait_s"], "steps": stats["steps"],
            "comm_alone_s": comm_alone, "lo_bytes": lo1 - lo0 if lo0 >= 0 else None,
            "work": stats["work"]}


def _ring_only(k, v, world, steps):
    import torch.distributed as dist
    if world == 1:
        return 0.0
    r = dist.get_rank()
    held = (k.detach(), v.detach())
    dist.barrier()
    t = time.perf_counter()
    for _ in range(2 * steps):                       # forward's and backward's K/V rotations
        bufs = tuple(torch.empty_like(x) for x in held)
        ops = [dist.P2POp(dist.isend, x, (r + 1) % world) for x in held]
        ops += [dist.P2POp(dist.irecv, b, (r - 1) % world) for b in bufs]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        held = bufs
    return time.perf_counter() - t


def context_parallel_job(rank: int, world: int, n: int, heads: int, d: int):
    """PyTorch's own context parallelism on the same problem, or why it cannot run here."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    mesh = init_device_mesh("cpu", (world,))
    q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            t = time.perf_counter()
            qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
            F.scaled_dot_product_attention(qg, kg, vg, is_causal=True).sum().backward()
            return {"ok": True, "seconds": time.perf_counter() - t}
    except Exception as error:                       # report, do not hide
        return {"ok": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}


def strategy_job(rank: int, world: int, n: int, heads: int, kv_heads: int, d: int, window):
    """Ring and all-to-all on the same shards: forward + backward time and bytes sent."""
    from attnlab.distributed import ulysses_attention
    torch.manual_seed(rank)
    layout = "contiguous" if window is not None else "zigzag"    # a band needs no balancing
    pos = local_positions(n, layout=layout)
    out = {}
    for name, fn in (("ring", ring_attention), ("ulysses", ulysses_attention)):
        q = torch.randn(1, heads, pos.numel(), d, requires_grad=True)
        k = torch.randn(1, kv_heads, pos.numel(), d, requires_grad=True)
        v = torch.randn(1, kv_heads, pos.numel(), d, requires_grad=True)
        best = float("inf")
        for _ in range(2):
            stats: dict = {}
            t = time.perf_counter()
            fn(q, k, v, causal=True, window=window, layout=layout, stats=stats,
               timeout=3600).sum().backward()
            best = min(best, time.perf_counter() - t)
        out[name] = {"seconds": best, "sent_bytes": stats["sent_bytes"],
                     "steps": stats["steps"]}
    return out


def hybrid_job(rank: int, world: int, n: int, heads: int, kv_heads: int, d: int):
    """Ring, all-to-all and the ring x all-to-all hybrid (every split of the world) on the same
    problem: forward + backward time (best of 2) and bytes this rank sent."""
    import torch.distributed as dist

    from attnlab.distributed import ulysses_attention
    from attnlab.distributed.hybrid import hybrid_attention, hybrid_shard, make_mesh
    torch.manual_seed(0)
    whole = [torch.randn(1, h, n, d) for h in (heads, kv_heads, kv_heads)]
    out = {}
    meshes = {u: make_mesh(world // u, u) for u in range(1, world + 1) if world % u == 0}
    for name in ["ring", "ulysses", *(f"hybrid {world // u}x{u}" for u in meshes)]:
        best, sent = float("inf"), 0
        for _ in range(2):
            if name.startswith("hybrid"):
                u = int(name.split("x")[1])
                parts = [hybrid_shard(t, meshes[u]).requires_grad_(True) for t in whole]
                call = lambda: hybrid_attention(*parts, mesh=meshes[u], causal=True,  # noqa
                                                timeout=3600)
            else:
                fn = ring_attention if name == "ring" else ulysses_attention
                parts = [shard_of(t).requires_grad_(True) for t in whole]
                call = lambda: fn(*parts, causal=True, layout="zigzag", timeout=3600)  # noqa
            dist.barrier()
            lo0, t = _lo_bytes(), time.perf_counter()
            call().sum().backward()
            dist.barrier()
            best = min(best, time.perf_counter() - t)
            sent = (_lo_bytes() - lo0) / world
        out[name] = {"seconds": best, "loopback_mb_per_rank": sent / 2**20}
    return out


def shard_of(x):
    from attnlab.distributed import shard
    return shard(x, layout="zigzag")


def compare_hybrid(n: int, d: int, world: int = 4) -> list[dict]:
    """The hybrid beside the ring and the all-to-all at P = ``world`` on gloo."""
    from attnlab.distributed.hybrid import choose_split
    rows = []
    for heads, kv_heads in ((8, 8), (8, 2), (6, 6), (4, 1)):
        res = spawn(hybrid_job, world, args=(n, heads, kv_heads, d), timeout=3600)
        row = {"P": world, "N": n, "H": heads, "H_kv": kv_heads,
               "rule_picks": "{}x{}".format(*choose_split(heads, kv_heads, world))}
        for name in res[0]:
            row[name] = {"seconds": max(r[name]["seconds"] for r in res),
                         "loopback_mb_per_rank": res[0][name]["loopback_mb_per_rank"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def compare_strategies(n: int, d: int) -> list[dict]:
    rows = []
    for world in (2, 4):
        for heads, kv_heads, window in ((8, 8, None), (8, 2, None), (6, 6, None),
                                        (8, 8, (256, 0))):
            res = spawn(strategy_job, world, args=(n, heads, kv_heads, d, window), timeout=3600)
            row = {"P": world, "N": n, "H": heads, "H_kv": kv_heads, "window": window,
                   "ring_steps": res[0]["ring"]["steps"]}
            for name in ("ring", "ulysses"):
                row[f"{name}_s"] = max(r[name]["seconds"] for r in res)
                row[f"{name}_forward_mb_per_rank"] = max(r[name]["sent_bytes"] for r in res) / 2**20
            from attnlab.distributed import choose_strategy
            row["rule_picks"] = choose_strategy(heads, kv_heads, world, window=window,
                                                n_local=n // world)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def precision_rows(n: int = 512, logit_std: float = 9.0) -> list[dict]:
    """Max error against float64 of out, dq, dk, dv of the simulated ring (zig-zag, causal,
    B = 2, H = 4, H_kv = 2, D = 32, q.k/sqrt(d) of std ``logit_std``) at P = 1 ... 16, and of the
    single-process reference in the same precision."""
    from attnlab.bench.distributed import ring_errors
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        errs = ring_errors(dtype, (1, 2, 4, 8, 16), n=n, logit_std=logit_std)
        for world in ("ref", 1, 2, 4, 8, 16):
            rows.append({"dtype": str(dtype).replace("torch.", ""),
                         "P": "reference" if world == "ref" else world,
                         **dict(zip(("out", "dq", "dk", "dv"), errs[world]))})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=65536)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--worlds", default="1,2,4")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--strategies", type=int, default=8192, metavar="N",
                   help="also time ring vs all-to-all at this N (0: skip)")
    p.add_argument("--figure", default=None, help="draw the layout figure to this path")
    p.add_argument("--precision", action="store_true",
                   help="only the error-vs-P table with large logits (one process)")
    p.add_argument("--no-overlap", action="store_true",
                   help="memory rows with ring_attention(overlap=False): the backward passes "
                   "K, V on one at a time after its blocks")
    p.add_argument("--hybrid", type=int, default=0, metavar="N",
                   help="only ring / all-to-all / ring x all-to-all at P = 4 and this N")
    args = p.parse_args()
    if args.hybrid:
        rows = compare_hybrid(args.hybrid, args.d)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"machine": f"{platform.processor() or platform.machine()}, torch "
                                      f"{torch.__version__}", "hybrid": rows}, f, indent=1)
        return
    if args.precision:
        for row in precision_rows():
            print(json.dumps(row))
        return
    if args.figure:
        from attnlab.plots.distributed import save_layout
        save_layout(args.figure)
    strategies = compare_strategies(args.strategies, args.d) if args.strategies else []
    # For the memory rows only (it slows every allocation down): large tensors in their own
    # mappings, returned on free, so the resident high-water mark is the peak of live memory,
    # not of what glibc's heap kept after earlier frees. The ranks inherit it.
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")
    rows = []
    for world in [int(w) for w in args.worlds.split(",")]:
        res = spawn(rank_job, world, args=(args.n, args.heads, args.d, not args.no_overlap),
                    timeout=7200)
        shard_kv = 2 * args.heads * (args.n // world) * args.d * 4
        theory_fwd = (world - 1) * shard_kv
        # backward: the K/V shards again, and the float64 dK/dV accumulators (twice a
        # float32 shard) passed on P - 1 times and sent home once
        theory_bwd = (world - 1) * shard_kv + (world if world > 1 else 0) * 2 * shard_kv
        lo = [r["lo_bytes"] for r in res]
        row = {
            "P": world, "N": args.n, "overlap": not args.no_overlap,
            "peak_above_inputs_mb": max(r["rss_peak_mb"] - r["rss_base_mb"] for r in res),
            "peak_rss_mb": max(r["rss_peak_mb"] for r in res),
            "inputs_mb": res[0]["inputs_mb"],
            "forward_s": max(r["forward_s"] for r in res),
            "backward_s": max(r["backward_s"] for r in res),
            "sent_per_rank_mb": max(r["sent_bytes"] + r["backward_sent_bytes"]
                                    for r in res) / 2**20,
            "ring_volume_mb": (theory_fwd + theory_bwd) / 2**20,
            "loopback_per_rank_mb": (lo[0] / world / 2**20) if lo[0] is not None else None,
            "wait_s": max(r["wait_s"] for r in res),
            "comm_alone_s": max(r["comm_alone_s"] for r in res),
            "work_max_over_min": max(r["work"] for r in res) / max(1, min(r["work"] for r in res)),
        }
        row["hidden_share"] = ((1 - row["wait_s"] / row["comm_alone_s"])
                               if row["comm_alone_s"] else None)
        rows.append(row)
        print(json.dumps(row), flush=True)
    cp = spawn(context_parallel_job, 2, args=(4096, args.heads, args.d), timeout=600)[0]
    print("torch context_parallel (P=2, N=4096, causal, gloo):", cp, flush=True)
    result = {"machine": f"{platform.processor() or platform.machine()}, "
                         f"{torch.get_num_threads()} threads, torch {torch.__version__}",
              "rows": rows, "context_parallel": cp, "strategies": strategies}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
