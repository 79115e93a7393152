"""Run the core's parity checks on an accelerator: every backend vs the float64 reference.

    python scripts/device_check.py --device cuda          # the check to run on a GPU machine
    python scripts/device_check.py --device cpu --quick   # the same code path on the CPU

Uses the test suite's cases (tests/core/test_backends.py) and tolerance rule (tests/helpers.py)
with every tensor on the chosen device: outputs and dQ, dK, dV within 2x / 3x of the plain
reference's error in the same precision, fully masked rows, N_q != N_k, a length straddling a
tile. Ends with one line "N passed, M failed" and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.core.test_backends import MASKS, SMALL_SHAPES, _inputs, _kwargs  # noqa: E402
from tests.helpers import assert_backend_matches  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="float32 only, small shapes only")
    args = p.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("device_check: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    shapes = SMALL_SHAPES + ([] if args.quick else [((1, 2), 1025, 1025, 64, 64)])
    dtypes = [torch.float32] if args.quick else [torch.float32, torch.bfloat16, torch.float16]
    passed = failed = 0
    t0 = time.perf_counter()
    for backend in ("sdpa", "tiled"):
        for shape in shapes:
            batch, n_q, n_k, d_k, d_v = shape
            for mask_name in MASKS:
                for dtype in dtypes:
                    q, k, v = (t.to(dev) for t in _inputs(batch, n_q, n_k, d_k, d_v))
                    kw = _kwargs(mask_name, batch, n_q, n_k, dtype)
                    if isinstance(kw.get("mask"), torch.Tensor):
                        kw["mask"] = kw["mask"].to(dev)
                    try:
                        assert_backend_matches(q, k, v, backend, dtype, **kw)
                        passed += 1
                    except (AssertionError, RuntimeError) as exc:
                        failed += 1
                        print(f"FAIL {backend} {shape} {mask_name} {dtype}: {exc}")
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}), "
          f"torch {torch.__version__}, {time.perf_counter() - t0:.0f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
