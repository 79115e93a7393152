"""The result folder every applied job writes: refused before any work when it is not
attnlab's, replaced whole when the run succeeds."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from attnlab._files import atomic_path

Say = Callable[[str], None]


def quiet(_: str) -> None:
    """A progress callback that says nothing (the default ``say``)."""



MARKER = ".attnlab-run"

# what `fit forecast` and `paper` compare with: the traditional methods applied users pick
CLI_BASELINES = ("seasonal_naive", "ets", "ar", "arima", "theta", "combination")


def check_out(out) -> None:
    """Refuse a bad ``--out`` before any work: a file, or a folder attnlab did not write that
    holds anything (the same rule :func:`result_folder` applies when it writes)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file; give a folder (a new one, or one an "
                         "earlier attnlab run wrote)")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(f"--out {str(out)!r} holds files attnlab did not write; give a new or "
                         "empty folder (a run replaces its --out folder whole)")


@contextmanager
def result_folder(out: Path):
    """A temporary folder beside ``out`` that replaces it whole when the run succeeds, so a
    run's outputs appear together or not at all (an interrupted run leaves an older run's
    folder as it was, never new files beside an old model). A folder attnlab did not write
    (no marker file) that holds anything is refused rather than replaced."""
    out = Path(out)
    check_out(out)
    with atomic_path(out, folder=True) as tmp:
        (tmp / MARKER).write_text("written by attnlab; the folder is replaced by the next run\n")
        yield tmp
