"""The commands on a busy machine: each job quiet, then beside a competing CPU load.

    python benchmarks/bench_busy.py [--load 2] [--compare]

The load is ``--load`` processes spinning in pure Python (as a second job on a shared
machine would). Each job runs with attnlab's default thread choice and, with ``--compare``,
also with ``--threads`` set to the CPU count (torch's own default). Prints a Markdown table
and writes ``benchmarks/results/busy.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBS = {
    "fit graph --example karate": ["fit", "graph", "--example", "karate"],
    "fit tabular --example wine": ["fit", "tabular", "--example", "wine"],
    "inspect (one sentence)": ["inspect"],
    "inspect (100-text corpus)": ["inspect", "--file", str(HERE / "results" / "corpus100.txt")],
}


def _spin(stop):
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


def _time(args, out, threads=None):
    cmd = [sys.executable, "-m", "attnlab.cli"] + (["--threads", str(threads)] if threads
                                                   else []) + args + ["--out", out]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--load", type=int, default=2)
    p.add_argument("--compare", action="store_true",
                   help="also time each job under load with --threads set to the CPU count")
    args = p.parse_args()
    cpus = len(os.sched_getaffinity(0))
    from attnlab.inspect.corpus import sentences

    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "corpus100.txt").write_text("\n".join(sentences()[:100]) + "\n")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, job in JOBS.items():
            quiet = _time(job, f"{tmp}/q")
            stop = mp.Event()
            load = [mp.Process(target=_spin, args=(stop,)) for _ in range(args.load)]
            for proc in load:
                proc.start()
            time.sleep(2)                      # let the load average see it
            try:
                busy = _time(job, f"{tmp}/b")
                busy_all = _time(job, f"{tmp}/c", threads=cpus) if args.compare else None
            finally:
                stop.set()
                for proc in load:
                    proc.join()
            rows[name] = {"quiet_s": quiet, "busy_s": busy, f"busy_threads_{cpus}_s": busy_all}
            print(name, rows[name], flush=True)
    print(f"\n| job | quiet s | busy s (default threads) | busy / quiet | busy s ({cpus} threads) |"
          " ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, r in rows.items():
        b2 = r[f"busy_threads_{cpus}_s"]
        tail = f"{b2:.1f} | {b2 / r['quiet_s']:.2f}" if b2 is not None else "- | -"
        print(f"| {name} | {r['quiet_s']:.1f} | {r['busy_s']:.1f} | "
              f"{r['busy_s'] / r['quiet_s']:.2f} | {tail} |")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "busy.json").write_text(json.dumps(
        {"cpus": cpus, "load_processes": args.load, "jobs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
