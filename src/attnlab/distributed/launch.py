"""Start P processes on this machine with a process group, and never wait forever for them.

:func:`spawn` is what the tests and the single-machine examples use; across machines use
``torchrun`` (docs/distributed.md), whose agent ends the other workers when one fails.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue as queue_mod
import tempfile
import time
import traceback

import torch.multiprocessing as mp

from attnlab.distributed._comm import DEFAULT_TIMEOUT, RankFailure, post_fault

FAILURE_GRACE = 3.0     # seconds the other ranks get to report after one has failed
# How spawn() starts its processes: "spawn" (a fresh interpreter each, the safe default) or
# "forkserver" (forked from a server process, which can import torch once for every rank:
# ``multiprocessing.get_context("forkserver").set_forkserver_preload([...])``; the test suite
# does so).
START_METHOD = "spawn"


class SpawnError(RuntimeError):
    """A spawned process failed or ran past its deadline; the message names the rank and why."""
    __module__ = "attnlab.distributed"

    """Some rank did not finish. ``reports[r]`` is rank r's error text (None if it finished);
    ``rank`` is the first rank that failed of its own accord (not from another's failure)."""

    def __init__(self, message: str, reports: dict, rank: int | None):
        super().__init__(message)
        self.reports, self.rank = reports, rank


def _worker(rank, world_size, fn, args, backend, init_file, timeout, threads, results):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout))
    try:
        value = fn(rank, world_size, *args)
    except BaseException as error:                  # report, tell the others, and end
        post_fault(rank, error)
        kind = "peer" if isinstance(error, RankFailure) else "error"
        results.put((rank, kind, "".join(traceback.format_exception_only(type(error), error))
                     .strip(), "".join(traceback.format_exception(error))))
        results.close()
        results.join_thread()
        os._exit(1)                                 # no teardown that could wait on peers
    # Plain pickle bytes: torch's queue would share tensors through file descriptors that
    # vanish with this process before the parent reads them.
    results.put((rank, "ok", pickle.dumps(value), None))
    results.close()
    results.join_thread()
    dist.destroy_process_group()


def spawn(fn, nprocs: int, *, args: tuple = (), backend: str = "gloo",
          timeout: float = 120.0, op_timeout: float | None = None,
          threads: int | None = None) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``nprocs`` fresh processes joined in one process
    group; return each rank's (picklable) result in rank order.

    ``fn`` must be importable (a module-level function). ``timeout`` bounds the whole run: after
    it every process still running is terminated and :class:`SpawnError` names them.
    ``op_timeout`` is the process group's own timeout for one collective (default ``timeout``).
    ``threads``: torch threads per process (default: the CPUs divided among the processes, so
    P processes do not oversubscribe the machine).
    If a rank raises, the others end with :class:`~attnlab.distributed.RankFailure` naming it
    (their next wait fails); a rank still running 3 s after the first failure (busy outside
    attnlab's calls) is terminated. :class:`SpawnError` then carries every rank's message.
    """
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be an int >= 1, got {nprocs!r}")
    ctx = mp.get_context(START_METHOD)
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="attnlab-spawn-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [ctx.Process(target=_worker, daemon=True,
                             args=(r, nprocs, fn, args, backend, init_file,
                                   op_timeout or min(timeout, DEFAULT_TIMEOUT),
                                   threads or max(1, (os.cpu_count() or 1) // nprocs), results))
                 for r in range(nprocs)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        done: dict[int, tuple] = {}
        failed_at = None
        while len(done) < nprocs:
            if failed_at is None and any(kind != "ok" for kind, _, _ in done.values()):
                # the others get a few seconds to end with their own RankFailure (their
                # waits on the failed rank fail at once); one that is busy elsewhere, or
                # sleeping, is terminated then, as torchrun's agent does
                failed_at = time.monotonic()
                deadline = min(deadline, failed_at + FAILURE_GRACE)
            try:
                rank, kind, value, detail = results.get(timeout=0.05)
                done[rank] = (kind, value, detail)
                continue
            except queue_mod.Empty:
                pass
            for r, p in enumerate(procs):      # died without a word (killed, os._exit)
                if r not in done and p.exitcode is not None and p.exitcode != 0:
                    time.sleep(0.2)            # its last message may still be in the pipe
                    try:
                        while True:
                            rr, kind, value, detail = results.get_nowait()
                            done[rr] = (kind, value, detail)
                    except queue_mod.Empty:
                        pass
                    if r not in done:
                        done[r] = ("error", f"exited with code {p.exitcode} without a result",
                                   None)
            if time.monotonic() > deadline:
                break
        for p in procs:
            p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
            if p.is_alive():
                p.terminate()
                p.join(5)
    if len(done) == nprocs and all(kind == "ok" for kind, _, _ in done.values()):
        return [pickle.loads(done[r][1]) for r in range(nprocs)]
    missing = ("terminated: still running when another rank had failed"
               if failed_at is not None else "did not finish in time (terminated)")
    reports = {r: (None if r in done and done[r][0] == "ok" else
                   done[r][1] if r in done else missing)
               for r in range(nprocs)}
    origin = next((r for r in range(nprocs) if r in done and done[r][0] == "error"), None)
    lines = [f"rank {r}: {reports[r]}" for r in range(nprocs) if reports[r] is not None]
    head = (f"rank {origin} failed" if origin is not None else
            f"ranks did not finish within {timeout:.0f} s")
    detail = done[origin][2] if origin is not None and done[origin][2] else ""
    raise SpawnError(f"{head}; every rank's outcome:\n  " + "\n  ".join(lines)
                     + (f"\n\nrank {origin}'s traceback:\n{detail}" if detail else ""),
                     reports, origin)
