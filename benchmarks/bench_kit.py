"""The conformance kit against every planted bug of attnlab.testing.bugs and the correct but
unusual implementations: caught or passed, by which case, and how long one check takes.

    python benchmarks/bench_kit.py            # the table of docs/efficient.md

Each implementation is checked as a user would: ``check_attention(fn, supports=...)`` with the
default precisions (float64, float32, bfloat16) and gradcheck; time is the whole check, one
thread of this machine's torch.
"""

from __future__ import annotations

import platform
import time

import torch

from attnlab.testing import check_attention
from attnlab.testing.bugs import BUGS, CORRECT


def main() -> None:
    rows = []
    for name, bug in BUGS.items():
        start = time.perf_counter()
        report = check_attention(bug.fn, supports=bug.supports)
        took = time.perf_counter() - start
        hit = [r for r in report.failures if r.case.startswith(bug.case)]
        rows.append((name, ", ".join(bug.supports) or "-", "caught" if hit else "MISSED",
                     hit[0].case + f" [{hit[0].dtype}]" if hit else "-",
                     len(report.failures), took))
    for name, (fn, supports) in CORRECT.items():
        start = time.perf_counter()
        report = check_attention(fn, supports=supports)
        took = time.perf_counter() - start
        rows.append((name + " (correct)", ", ".join(supports), "passed" if report
                     else "FALSE ALARM", "-", len(report.failures), took))
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}\n")
    print("| implementation | declares | result | first case that fails it | failing cases "
          "| time |")
    print("|---|---|---|---|---|---|")
    for name, sup, res, case, n, took in rows:
        print(f"| {name} | {sup} | {res} | {case} | {n} | {took:.1f} s |")


if __name__ == "__main__":
    main()
