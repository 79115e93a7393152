"""docs/tutorials/*.ipynb, stored with their outputs so that a reader sees every figure and
number on GitHub without running anything. The suite re-executes each chapter with nbclient,
offline, as a reader runs it, and checks that:

* every cell runs and every figure is drawn;
* what each cell prints matches what is stored: the same words, and numbers within 0.1%
  (numbers under 1e-4, measured rounding errors, only as words). Cells tagged ``varies``
  print timings or the results of float32 training, which depend on the machine, and are not
  compared;
* each exercise's unwritten or buggy first version is caught (``FAIL:``) in the chapter, which
  shows no passing answer, and every solution in the chapter's companion notebook
  (``docs/tutorials/solutions/``, out of sight until the reader opens it) passes.

To store a chapter after editing it: ``python -m tests.test_tutorials docs/tutorials/X.ipynb``
(it re-executes the chapter and writes it with its outputs).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

pytestmark = pytest.mark.tutorial

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "docs" / "tutorials").glob("*.ipynb"))
SOLUTIONS = sorted((TUTORIALS[0].parent / "solutions").glob("*.ipynb"))
FIGURES = {"01": 2, "02": 3, "03": 2, "04": 2, "05": 3, "06": 4, "07": 3, "08": 2, "09": 2,
           "10": 2, "11": 2, "12": 2, "13": 2, "14": 2, "15": 2, "16": 2}
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def execute(nb, path: Path) -> None:
    """Run ``nb`` in a fresh kernel in its own folder; each cell has a deadline, so a reader's
    notebook never hangs the suite."""
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path)}}).execute()
    for cell in nb.cells:                       # warnings go to stderr: not kept, not compared
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]


def printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


def same_text(stored: str, fresh: str) -> str | None:
    """None if ``fresh`` says what ``stored`` says (numbers within tolerance), else why not."""
    if NUMBER.sub("#", stored) != NUMBER.sub("#", fresh):
        return f"the words differ:\n  stored {stored[:300]!r}\n  now    {fresh[:300]!r}"
    for a, b in zip(NUMBER.findall(stored), NUMBER.findall(fresh)):
        x, y = float(a), float(b)
        if max(abs(x), abs(y)) < 1e-4:          # rounding errors: their digits vary by CPU
            continue
        if abs(x - y) > 1e-3 * max(abs(x), abs(y)):
            return f"{a} is now {b} in:\n  {fresh[:300]!r}"
    return None


def test_there_are_the_indexed_chapters():
    assert [p.name[:2] for p in TUTORIALS] == list(FIGURES)
    index = (TUTORIALS[0].parent / "README.md").read_text()
    for p in TUTORIALS:
        assert p.name in index, f"docs/tutorials/README.md does not list {p.name}"


@pytest.mark.parametrize("path", TUTORIALS + SOLUTIONS,
                         ids=lambda p: p.stem + ("-solutions" if p.parent.name == "solutions"
                                                 else ""))
def test_the_tutorial_reruns_as_stored_and_its_exercises_are_checked(path, tmp_path,
                                                                      monkeypatch):
    # over 5 s for most chapters: a notebook runs whole in its own kernel; this is the only
    # test that executes each chapter and checks its exercises
    # the kernel inherits one thread per xdist worker, as the workers themselves run
    # (two kernels with torch's default pool each on a 2-core machine spin against each other)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    stored = nbformat.read(path, as_version=4)
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "stored without its outputs: refresh it"
    fresh = nbformat.read(path, as_version=4)
    execute(fresh, tmp_path)
    outputs = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    solutions = path.parent.name == "solutions"
    assert len(images) == (0 if solutions else FIGURES[path.name[:2]])
    stored_images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(stored_images) == len(images), "the stored figures are not the drawn ones"
    for old, new in zip(code, (c for c in fresh.cells if c.cell_type == "code")):
        if "varies" in old.metadata.get("tags", []):
            continue
        why = same_text(printed(old), printed(new))
        assert why is None, f"{path.name}: {why}"
    text = "".join(printed(c) for c in fresh.cells if c.cell_type == "code")
    verdicts = re.findall(r"^exercise (\d+\.\d+) (passed|FAIL)", text, re.MULTILINE)
    if solutions:                                  # every worked answer passes its check
        assert len({e for e, _ in verdicts}) == 3 and all(v == "passed" for _, v in verdicts)
    else:                                          # the first tries are caught, none passes
        assert {e for e, _ in verdicts} and all(v == "FAIL" for _, v in verdicts), verdicts


def test_no_chapter_shows_a_solution_and_every_one_has_its_companion():
    """The answers stay out of sight: a chapter holds no solution (no cell after its last
    exercise, no passing check, no "## Solutions" followed by code), links each exercise to its
    companion, and the companion holds the worked answer to each of the three exercises."""
    assert [p.name for p in SOLUTIONS] == [p.name for p in TUTORIALS]
    for path in TUTORIALS:
        nb = nbformat.read(path, as_version=4)
        checks = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  and re.search(r'check\("\d+\.\d+"', c.source)]
        assert len(checks) == 3, path.name
        after = [c for c in nb.cells[checks[-1] + 1:] if c.cell_type == "code"]
        assert not after, f"{path.name}: code after the last exercise"
        links = [c for c in nb.cells if f"solutions/{path.name}" in c.source]
        assert len(links) >= 3, f"{path.name}: each exercise links to its solutions"
        companion = nbformat.read(path.parent / "solutions" / path.name, as_version=4)
        answered = set(re.findall(r'check\("(\d+\.\d+)"', "\n".join(
            c.source for c in companion.cells if c.cell_type == "code")))
        asked = {re.search(r'check\("(\d+\.\d+)"', nb.cells[i].source).group(1)
                 for i in checks}
        assert answered == asked, (path.name, answered, asked)


def test_the_comparison_tolerates_rounding_and_catches_a_changed_number():
    assert same_text("error 1.6e-15, loss 0.4242\n", "error 2.1e-15, loss 0.42421\n") is None
    assert same_text("float32 error 5.53e-07\n", "float32 error 4.9e-07\n") is None
    assert "0.4242 is now 0.5" in same_text("loss 0.4242\n", "loss 0.5\n")
    assert "words differ" in same_text("passed\n", "FAIL: x\n")


def refresh(path: Path) -> None:
    """Re-execute a chapter and store it with its outputs (what a contributor runs)."""
    nb = nbformat.read(path, as_version=4)
    execute(nb, path.parent)
    nbformat.write(nb, path)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        refresh(Path(arg))


def test_each_chapter_states_the_run_time_the_index_measured():
    """One source for run times: the index's table (one measurement of every chapter) and a
    chapter's own "Runs in about N seconds" say the same N."""
    index = (TUTORIALS[0].parent / "README.md").read_text(encoding="utf-8")
    measured = {int(m.group(1)): int(m.group(2)) for m in
                re.finditer(r"^\| \[(\d+)\. .*\| (\d+) s \|", index, re.MULTILINE)}
    assert len(measured) == len(TUTORIALS)
    for path in TUTORIALS:
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        said = [int(x) for x in re.findall(r"[Rr]uns in (?:about )?(\d+) seconds", text)]
        n = int(path.name[:2])
        assert all(x == measured[n] for x in said), (path.name, said, measured[n])
