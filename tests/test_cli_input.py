"""User input the commands refuse, each with one line naming the input and the fix (and exit
code 2), before any expensive work; and output that stays readable in a narrow terminal."""

import json
import shutil
import subprocess
import sys

import pytest

from attnlab.cli import main
from attnlab.nn.bert import default_model_path


def _refused(capsys, args, words):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    return err


@pytest.fixture
def model_copy(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(default_model_path(), dst)
    return dst


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text(capsys, tmp_path, text):
    _refused(capsys, ["inspect", text, "--out", str(tmp_path)], "TEXT is empty")
    _refused(capsys, ["explain", "--model", "default", "--text", text, "--no-plots"],
             "--text is empty")


def test_a_model_folder_without_tokenizer(capsys, tmp_path, model_copy):
    for f in ("tokenizer.json", "vocab.txt"):
        (model_copy / f).unlink()
    _refused(capsys, ["inspect", "hello", "--model", str(model_copy), "--out", str(tmp_path)],
             "holds no tokenizer")


def test_a_truncated_safetensors_file(capsys, tmp_path, model_copy):
    w = model_copy / "model.safetensors"
    w.write_bytes(w.read_bytes()[:10_000])
    _refused(capsys, ["inspect", "hello", "--model", str(model_copy), "--out", str(tmp_path)],
             "truncated or corrupted")


def test_a_broken_config(capsys, tmp_path, model_copy):
    (model_copy / "config.json").write_text("{ not json")
    err = _refused(capsys, ["inspect", "hello", "--model", str(model_copy),
                            "--out", str(tmp_path)], "config.json")
    assert "not valid JSON" in err


def test_explain_refuses_long_text_and_model_temperature(capsys):
    _refused(capsys, ["explain", "--model", "default", "--no-plots", "--text",
                      " ".join(["word"] * 80)], "at most 64")
    _refused(capsys, ["explain", "--model", "default", "--temperature", "5", "--no-plots"],
             "--temperature")


def test_out_naming_a_file(capsys, tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    _refused(capsys, ["inspect", "hello", "--out", str(f)], "is a file")
    _refused(capsys, ["explain", "--out", str(f)], "is a file")


def test_unknown_words_are_said(capsys, tmp_path):
    assert main(["explain", "--model", "default", "--no-plots", "--text", "注意力机制"]) == 0
    assert "[UNK]" in capsys.readouterr().out


def test_explain_is_readable_in_a_pipe():
    """Piped (80 columns), a 20-token sentence prints every number whole, in column blocks."""
    text = "Attention lets every token look at every other token and average what they say."
    proc = subprocess.run([sys.executable, "-m", "attnlab.cli", "explain", "--model", "default",
                           "--no-plots", "--text", text], capture_output=True, text=True,
                          timeout=120, env={"COLUMNS": "80", "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in proc.stdout
    assert "columns 0-" in proc.stdout
