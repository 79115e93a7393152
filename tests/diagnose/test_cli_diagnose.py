"""attnlab diagnose on the embedded model, and its usage errors."""

from __future__ import annotations

from attnlab.cli import main


def test_diagnose_prints_every_layer(capsys):
    assert main(["diagnose", "The cat sat on the mat."]) == 0
    out = capsys.readouterr().out
    assert "attention health of default on 9 tokens" in out and "encoder.layers." in out
    for i in range(6):
        assert f"{i}.self_attn" in out
    assert "learning rate" not in out and "qk_norm" not in out   # a trained model: no advice


def test_diagnose_usage_errors(capsys, tmp_path):
    assert main(["diagnose", "  "]) == 2
    assert "TEXT is empty" in capsys.readouterr().err
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["diagnose", "--demo", "--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert main(["diagnose", "--model", str(tmp_path / "nothing")]) == 2


