"""One benchmark cell in its own process (so that its peak memory is its own):
``python -m attnlab.bench --cell METHOD GROUP N BACKWARD REPEATS`` prints the cell as JSON.
:func:`attnlab.bench.cells.run` starts it; it is not meant to be called by hand."""

import json
import sys

from attnlab.bench.cells import measure_cell

if len(sys.argv) != 7 or sys.argv[1] != "--cell":
    sys.exit("usage: python -m attnlab.bench --cell METHOD GROUP N BACKWARD REPEATS")
method, group, n, backward, repeats = sys.argv[2:7]
print(json.dumps(measure_cell(method, group, int(n), bool(int(backward)), int(repeats))))
