"""A run's outputs appear together or not at all, and a command leaves torch's threads as
they were."""

import os
import select
import signal
import subprocess
import sys
import time

import torch

from attnlab.cli import main
from tests.cli.test_cli import sigint_default

FIT = ["fit", "tabular", "--example", "wine", "--folds", "2", "--max-epochs", "3"]


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_an_interrupted_run_leaves_the_older_run_whole(tmp_path):
    # over 5 s: a real process is killed mid-fit; the only check that an interrupted run leaves
    # the older folder whole
    out = tmp_path / "mix"
    assert main(FIT + ["--out", str(out)]) == 0
    before = _snapshot(out)
    assert (out / ".attnlab-run").is_file() and (out / "model").is_dir()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.cli", *FIT, "--seed", "1",
                             "--max-epochs", "200", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    deadline = time.monotonic() + 120
    seen = ""
    try:
        while "cross-validation" not in seen and time.monotonic() < deadline:
            # the job says what it does; wait for its output at most until the deadline
            ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
            if not ready:
                break
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "cross-validation" in seen, seen
    except BaseException:
        proc.kill()
        proc.communicate(timeout=30)
        raise
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert _snapshot(out) == before                # the old run, file for file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix"]   # no temporary left


def test_a_folder_attnlab_did_not_write_is_not_replaced(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    assert main(FIT + ["--out", str(out)]) == 2
    assert "did not write" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "precious"


def test_threads_are_restored(tmp_path):
    before = torch.get_num_threads()
    assert main(["--threads", "3", "backends"]) == 0
    assert torch.get_num_threads() == before


def test_the_thread_choice():
    from attnlab.cli.app import choose_threads

    assert choose_threads("fit", None) == 1
    assert choose_threads("inspect", 5) == 5
    assert 1 <= choose_threads("inspect", None) <= len(os.sched_getaffinity(0))
