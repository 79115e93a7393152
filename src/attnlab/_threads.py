"""Threads for attnlab's long calls: as many as the CPUs this process may use less the load
other processes put on them (at least 1), the rule the CLI applies to its commands.

A census on kjv at 4,096 bytes took 69 s with torch's default threads on a loaded 2-core
machine and 2.6 s on one thread: oversubscribed threads wait on each other. The library's long
calls (``census``, ``show``) run on :func:`spare_cpus` threads when the caller's setting asks
for more, and put the caller's setting back on return (:func:`spare_threads`).
"""

from __future__ import annotations

import contextlib
import os


def spare_cpus() -> int:
    """The CPUs this process may use (its affinity) less the 1-minute load average, at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                           # not on Linux
        cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (OSError, AttributeError):
        busy = 0.0
    return max(1, min(cpus, round(cpus - busy + 1)))


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
