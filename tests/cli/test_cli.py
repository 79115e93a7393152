"""The attnlab command: explain, backends, and one-line usage errors with exit status 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.explain import example, walk


def test_explain_default_prints_steps_checks_and_writes_heatmaps(tmp_path, capsys):
    assert main(["explain", "--causal", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for step in ("S = Q K^T", "A = E / l", "O = A V", "-inf", "PASS", "backend tiled",
                 "backend sdpa"):
        assert step in text
    assert "FAIL" not in text
    for name in ("scores.png", "weights.png", "mask.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert not list(tmp_path.glob(".*"))          # no temporary files left behind


def test_explain_random_example_with_window(tmp_path, capsys):
    assert main(["explain", "--seed", "3", "--n", "9", "--d", "5", "--window", "2,1",
                 "--no-plots"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "t8" in text and "window (left=2, right=1)" in text


@pytest.mark.parametrize("args, words", [
    (["explain", "--window", "x"], "--window must be"),
    (["explain", "--n", "0"], "Invalid value for '--n'"),
    (["explain", "--temperature", "-1"], "temperature must be"),
    (["explain", "--bogus"], "No such option"),
    (["nonsense"], "No such command"),
])
def test_usage_errors_are_one_line_exit_2(args, words, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_console_script_exit_status_without_traceback():
    exe = Path(sys.executable).parent / "attnlab"
    proc = subprocess.run([str(exe), "explain", "--window", "-3"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("attnlab: error: window must be")
    assert "Traceback" not in proc.stderr


def test_backends_command_lists_capabilities(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    for name in ("reference", "sdpa", "tiled", "lse", "dropout", "softcap", "gqa", "score_mod"):
        assert name in out


def test_walk_checks_fully_masked_rows():
    tokens, q, k, v = example(n=5, d=3, seed=1)
    wt = walk(tokens, q, k, v, causal=True, window=(0, 0))
    assert wt.ok and torch.equal(wt.keep, torch.eye(5, dtype=torch.bool))
    # Query 0 with a window ending before the first key sees nothing.
    tokens, q, k, v = example(n=4, d=3, seed=1)
    wt = walk(tokens, q, k[:3], v[:3], causal=True)
    assert wt.ok and any(c.name.startswith("fully masked") for c in wt.checks)
    assert (wt.o[0] == 0).all()


def test_explain_real_model_head(tmp_path, capsys):
    assert main(["explain", "--model", "default", "--text", "Attention is <b>all</b> you need.",
                 "--layer", "1", "--head", "3", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "[CLS]" in text and "[SEP]" in text and "first 8 of 32 dims" in text
    assert "PASS A equals the transformers attention map" in " ".join(text.split())
    assert "FAIL" not in text
    assert (tmp_path / "weights.png").stat().st_size > 10_000


@pytest.mark.parametrize("args, words", [
    (["--layer", "6"], "layer must be in 0..5"),
    (["--head", "-1"], "head must be in 0..11"),
    (["--causal"], "apply to the built-in example"),
])
def test_explain_model_usage_errors(args, words, capsys):
    assert main(["explain", "--model", "default", "--no-plots", *args]) == 2
    assert words in capsys.readouterr().err


def test_version_window_none_and_subcommand_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip().startswith("attnlab 0.")
    assert main(["explain", "--window", "none", "--n", "3", "--d", "2", "--seed", "1",
                 "--no-plots"]) == 0                     # its own error message offers "none"
    capsys.readouterr()
    assert main(["fit"]) == 0
    out = capsys.readouterr().out
    assert "forecast" in out and "tabular" in out and "explain" not in out


def sigint_default():
    """In the child: SIGINT back to its default. A job started in the background by a
    non-interactive shell (as a CI runner may start the suite) inherits SIGINT ignored, and
    Python then never turns it into KeyboardInterrupt; a terminal's Ctrl-C is what is tested."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_with_one_line():
    # over 5 s: a real SIGINT to a running training process; the only test of Ctrl-C's exit
    import selectors
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "attnlab.cli", "demo", "seq2seq", "--out",
                             os.devnull + "-not-written"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    # Off a terminal the command says what it starts before it starts: interrupt once it said
    # so (past the imports, into training), however slow the machine is today.
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline, said = time.monotonic() + 120, ""
    while "training" not in said and time.monotonic() < deadline:
        if sel.select(timeout=1.0):
            said += proc.stdout.readline()
    sel.close()
    if "training the reversal seq2seq model ..." not in said:
        proc.kill()
        proc.communicate(timeout=60)
        raise AssertionError(f"no word of training within 120 s: {said!r}")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "attnlab: interrupted"
    assert "Traceback" not in err


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8])
def test_ctrl_c_during_start_up_is_one_line_and_130(delay):
    # Interrupted while Python is still importing torch, typer or the commands: the handler is
    # installed first, so the same single line and status as later.
    import signal
    import time

    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "attnlab"),
                             "backends"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=sigint_default)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    if lines and lines[-1] == "KeyboardInterrupt" and "from attnlab.cli import main" in err \
            and ", in main" not in err:
        # under load the signal can come while the console script is still importing the
        # package, before main() runs its first line: Python's own default handler, out of
        # attnlab's reach (and the earliest moment the test can hit)
        assert "RecursionError" not in err
        return
    assert "Traceback" not in err and "RecursionError" not in err
    if proc.returncode == 0:               # it finished before the signal came: nothing to see
        return
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines() == ["attnlab: interrupted"], err


def test_check_imports_a_module_of_the_current_folder(tmp_path, monkeypatch, capsys):
    # As `python -m` would: mypkg/kernels.py next to where the command runs, no PYTHONPATH.
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(
        "from attnlab import attention\n\n"
        "def mine(q, k, v, **kw):\n    return attention(q, k, v, backend='reference', **kw)\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    assert main(["check", "mypkg.kernels:mine", "--dtypes", "float64"]) == 0
    assert sys.path == before                                  # the folder was not left behind
    assert "FAIL" not in capsys.readouterr().out


def test_training_commands_import_torchs_compiler_under_the_start_up_handler():
    # torch.optim imports torch._dynamo (and Triton's C++ extension, where installed) at the
    # first optimizer; a Ctrl-C inside that extension's initialisation aborted the process
    # ("terminate called after throwing an instance of 'nanobind::python_error'"). The
    # training commands import it at start-up, where an interrupt is one line and 130.
    code = ("import sys\nfrom attnlab.cli import main\nmain([sys.argv[1], '--help'])\n"
            "print('DYNAMO', 'torch._dynamo' in sys.modules)\n")
    for command, loaded in (("demo", True), ("backends", False)):
        proc = subprocess.run([sys.executable, "-c", code, command], capture_output=True,
                              text=True, timeout=180)
        assert f"DYNAMO {loaded}" in proc.stdout, (command, proc.stdout[-300:], proc.stderr[-500:])
