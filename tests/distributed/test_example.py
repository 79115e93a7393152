"""The torchrun example trains on sequences split over two processes, and its first step's loss
equals the one-process loss on the whole batch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed")]
ROOT = Path(__file__).resolve().parents[2]


def test_ring_train_example_under_torchrun():
    # over 5 s: the only run of the torchrun example (two ranks, exactness against one process)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(ROOT / "examples" / "ring_train.py"), "--steps", "3", "--length", "48",
           "--every", "1", "--check"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    # the ranks' own lines (an abort's "what():") come before torchrun's summary: keep both
    own = [ln for ln in done.stderr.splitlines() if "what()" in ln or "terminate" in ln
           or "Error" in ln][:10]
    assert done.returncode == 0, "\n".join([*own, done.stdout[-800:], done.stderr[-1500:]])
    m = re.search(r"loss over 2 ranks ([\d.]+), in one process ([\d.]+)", done.stdout)
    assert m, done.stdout
    assert abs(float(m.group(1)) - float(m.group(2))) < 1e-5
    assert "step    2" in done.stdout


def test_ring_train_example_refuses_to_run_without_a_launcher():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "ring_train.py")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "run under torchrun" in done.stderr


def test_hf_long_context_example_under_torchrun():
    # over 5 s: the only run of the transformers example (a Llama sharded over two ranks,
    # its first loss against transformers' own in one process)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(ROOT / "examples" / "hf_long_context.py"), "--steps", "2", "--length", "96",
           "--check"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-1500:]
    m = re.search(r"loss over 2 ranks ([\d.]+), in one process ([\d.]+)", done.stdout)
    assert m, done.stdout
    assert abs(float(m.group(1)) - float(m.group(2))) < 1e-5
    assert "activation memory per rank (MiB)" in done.stdout and "step   1" in done.stdout
