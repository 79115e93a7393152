"""Structured masks and approximations against SDPA and FlexAttention: the same run as
`attnlab bench` (see attnlab/bench.py for what is measured and how).

    python benchmarks/bench_efficient.py [--quick] [--n N ...] [--out DIR]
"""

import sys

from attnlab.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
