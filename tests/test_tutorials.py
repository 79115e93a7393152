"""docs/tutorials/*.ipynb, executed by nbclient as a reader runs them: stored without outputs,
every cell runs, every figure is drawn, each exercise's first version is caught by
attnlab.testing and its solution passes."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat
import pytest

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "docs" / "tutorials").glob("*.ipynb"))
FIGURES = {"01": 2, "02": 3, "03": 2, "04": 2, "05": 2, "06": 2}


def test_there_are_six_chapters():
    assert [p.name[:2] for p in TUTORIALS] == list(FIGURES)


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_the_tutorial_runs_and_its_exercise_is_checked(path, tmp_path, monkeypatch):
    # over 5 s for chapters 01, 04, 05, 06: a notebook runs whole in its own kernel; this is the
    # only test that executes each chapter and checks its exercise
    # the kernel inherits one thread per xdist worker, as the workers themselves run
    # (two kernels with torch's default pool each on a 2-core machine spin against each other)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code"), "stored with outputs stripped"
    # each cell has a deadline: a reader's notebook never hangs the suite
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == FIGURES[path.name[:2]]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    last = text.rindex(" passed (")                          # the solution's verdict
    assert "FAIL:" in text[:last] and "FAILED" not in text   # the bug caught, the fix passes
