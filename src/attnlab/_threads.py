"""Threads for attnlab's long calls: as many as the CPUs this process may use less the load
other processes put on them (at least 1), the rule the CLI applies to its commands.

A census on kjv at 4,096 bytes took 69 s with torch's default threads on a loaded 2-core
machine and 2.6 s on one thread: oversubscribed threads wait on each other. The library's long
calls (``census``, ``show``) run on :func:`spare_cpus` threads when the caller's setting asks
for more, and put the caller's setting back on return (:func:`spare_threads`).

The load is what other processes run now (:func:`busy_cpus`), not the 1-minute load average:
that average counts this process's own last minute, so a census right after a forward on 2
cores read a load of 2, took one thread and ran at half speed (SmolLM2 at 8,192 tokens).
"""

from __future__ import annotations

import contextlib
import os
import time


def _running(path: str) -> int:
    with open(path) as f:
        return int(f.read().split()[3].split("/")[0])


def _own_running() -> int:
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                n += f.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            pass
    return n


def busy_cpus(samples: int = 3, gap_s: float = 0.005) -> float:
    """The CPUs other processes keep busy now: the kernel's count of runnable threads
    (``/proc/loadavg``) less this process's own, the median of ``samples`` reads ``gap_s``
    apart; where /proc cannot be read, the 1-minute load average less 1 (this process)."""
    counts = []
    try:
        for n in range(samples):
            counts.append(max(0, _running("/proc/loadavg") - _own_running()))
            if n + 1 < samples:
                time.sleep(gap_s)
    except (OSError, ValueError, IndexError):
        try:
            return max(0.0, os.getloadavg()[0] - 1.0)
        except (OSError, AttributeError):
            return 0.0
    return float(sorted(counts)[len(counts) // 2])


def spare_cpus() -> int:
    """The CPUs this process may use (its affinity) less those other processes keep busy
    (:func:`busy_cpus`), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                           # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, round(cpus - busy_cpus())))


@contextlib.contextmanager
def spare_threads():
    """Within the block, torch uses at most :func:`spare_cpus` threads (never more than the
    caller set); the caller's setting is restored on exit, whatever happens."""
    import torch

    before = torch.get_num_threads()
    use = min(before, spare_cpus())
    if use != before:
        torch.set_num_threads(use)
    try:
        yield use
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def uses_spare_threads(fn):
    """Decorate a long call so that it runs within :func:`spare_threads`."""
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with spare_threads():
            return fn(*args, **kwargs)

    return call
