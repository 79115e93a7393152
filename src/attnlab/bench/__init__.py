"""The measuring library behind ``attnlab bench`` and ``benchmarks/``.

* :mod:`~attnlab.bench.cells`: every backend and approximation timed against SDPA and
  FlexAttention, one process per cell for its own peak memory (the process entry is
  ``python -m attnlab.bench``); the machine description every benchmark records;
* :mod:`~attnlab.bench.model`: each approximation swapped into the embedded model and
  measured on bundled passages (``attnlab bench --model default``).
"""

from attnlab.bench.cells import (
    GROUPS,
    QUICK_SIZES,
    SIZES,
    errors,
    machine,
    measure_cell,
    ratio,
    run,
    time_and_peak,
    tradeoff,
)

__all__ = ["GROUPS", "QUICK_SIZES", "SIZES", "errors", "machine", "measure_cell", "ratio",
           "run", "time_and_peak", "tradeoff"]
