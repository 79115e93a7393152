"""How long a failing rank takes to end the whole job, under attnlab's spawn and under torchrun.

    python benchmarks/bench_faults.py                       # every case, P = 3 (spawn) / 2
    python benchmarks/bench_faults.py --timeout 5 --out /tmp/faults.json

Cases (rank 1 is the one at fault; the others call ``ring_attention(..., timeout=T)``):

* ``raise``: rank 1 raises in its own code between two calls;
* ``die-forward``: rank 1's process exits inside the forward (in its mask function);
* ``die-between``: rank 1 exits after the forward, before the backward;
* ``never``: rank 1 never reaches the call (it sleeps for 10 minutes);
* ``stale``: every rank refuses a call (rank 1 passed another head dim) and goes on, then rank 1
  raises inside the next call: the others must report that failure, not the refusal.

Under torchrun the process group keeps torch's default timeout (30 minutes): only attnlab's
``timeout=`` bounds the waits. Each row: wall time from the fault to the end of every process,
and what rank 0 reported. Run as a torchrun worker with ``--worker CASE``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.abspath(__file__)
CASES = ("raise", "die-forward", "die-between", "never", "stale")


def case(rank: int, world: int, name: str, timeout: float, stamps: str) -> dict:
    """One rank's part of a case; returns what happened (for spawn) or raises."""
    from attnlab.distributed import ring_attention

    torch.set_num_threads(1)
    q = torch.randn(1, 2, 64, 16, requires_grad=True)
    ring_attention(q, q, q, causal=True, timeout=timeout).sum().backward()   # a good call
    fault = {"at": time.time()}

    def mask(b, h, qi, ki):
        if rank == 1 and name == "die-forward":
            os._exit(9)
        if rank == 1 and name == "stale":
            raise ValueError("rank 1's mask function failed")
        return ki <= qi

    if name == "stale":
        x = torch.randn(1, 2, 64, 8) if rank == 1 else q.detach()
        try:
            ring_attention(x, x, x, timeout=timeout)            # refused on every rank
        except ValueError:
            pass
    if rank == 1 and name == "raise":
        raise RuntimeError("rank 1's model code failed")
    if rank == 1 and name == "never":
        time.sleep(600)
    with open(f"{stamps}.{rank}", "w") as f:        # when this rank reached the fault
        f.write(f"{time.time():.3f}")
    out = ring_attention(q, q, q, mask=mask, timeout=timeout)
    if rank == 1 and name == "die-between":
        os._exit(9)
    out.sum().backward()
    return fault


def _fault_time(stamps: str, world: int, fallback: float) -> float:
    """The earliest time a rank reached the faulty call (the stamp files ``case`` wrote)."""
    times = []
    for r in range(world):
        try:
            with open(f"{stamps}.{r}") as f:
                times.append(float(f.read()))
            os.remove(f"{stamps}.{r}")
        except (OSError, ValueError):
            pass
    return min(times) if times else fallback


def under_spawn(name: str, timeout: float, world: int, stamps: str) -> dict:
    from attnlab.distributed import SpawnError, spawn

    start = time.time()
    try:
        spawn(case, world, args=(name, timeout, stamps), timeout=600)
        report = {"rank0": "finished (no fault seen)"}
    except SpawnError as error:
        report = {"rank0": (error.reports[0] or "finished").splitlines()[0][:300],
                  "rank1": (error.reports[1] or "finished").splitlines()[0][:200]}
    end = time.time()
    return {"case": name, "launcher": "spawn",
            "seconds": end - _fault_time(stamps, world, start), **report}


def under_torchrun(name: str, timeout: float, stamps: str) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", HERE, "--worker", name, "--timeout", str(timeout), "--stamps", stamps]
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    end = time.time()
    first = _fault_time(stamps, 2, start)
    lines = [ln for ln in done.stderr.splitlines() if "[rank0]:" in ln and "Error" in ln
             or "[rank0]: attnlab" in ln]
    return {"case": name, "launcher": "torchrun", "seconds": end - first,
            "returncode": done.returncode,
            "rank0": (lines[-1].split("]:", 1)[-1].strip() if lines else "")[:300]}


def worker(name: str, timeout: float, stamps: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")                        # torch's default 30-minute timeout
    case(dist.get_rank(), dist.get_world_size(), name, timeout, stamps)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=5.0, help="attnlab's timeout= (s)")
    p.add_argument("--world", type=int, default=3, help="ranks under spawn")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--stamps", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.timeout, args.stamps)
        return
    rows = []
    tmp = tempfile.mkdtemp(prefix="attnlab-faults-")
    stamps = os.path.join(tmp, "fault")
    for name in args.cases.split(","):
        for row in (under_spawn(name, args.timeout, args.world, stamps),
                    under_torchrun(name, args.timeout, stamps)):
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"timeout": args.timeout, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
