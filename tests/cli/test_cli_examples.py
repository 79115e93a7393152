"""Every command the docs show, run as documented (slow tier: make check)."""

import pytest

from attnlab.cli import main

pytestmark = pytest.mark.slow


def test_documented_example_commands_run(tmp_path, capsys, monkeypatch):
    # over 5 s: the README's three example commands, each the only run of its CLI path
    # The README's `fit forecast --example co2`, `fit graph --example karate` and
    # `demo seq2seq`, with fewer epochs and origins (the full runs are in benchmarks/applied.py).
    assert main(["fit", "forecast", "--example", "co2", "--origins", "2", "--max-epochs", "3",
                 "--out", str(tmp_path / "co2")]) == 0
    assert {"backtest.png", "attention.png", "forecast.png", "metrics.json", "model"} <= {
        p.name for p in (tmp_path / "co2").iterdir()}
    assert main(["predict", "--model", str(tmp_path / "co2" / "model"), "--horizon", "24",
                 "--out", str(tmp_path / "f.csv")]) == 0
    assert len((tmp_path / "f.csv").read_text().splitlines()) == 25
    assert main(["fit", "graph", "--example", "karate", "--max-epochs", "5",
                 "--out", str(tmp_path / "karate")]) == 0
    assert "label propagation 0.812" in " ".join(capsys.readouterr().out.split())
    from attnlab.models import seq2seq

    class Small(seq2seq.ReversalSeq2Seq):
        def __init__(self, seed=0, verbose=False):
            super().__init__(max_len=6, n_train=500, hidden=16, max_epochs=1, seed=seed,
                             verbose=verbose)

    monkeypatch.setattr(seq2seq, "ReversalSeq2Seq", Small)
    assert main(["demo", "seq2seq", "--text", "2718", "--out", str(tmp_path / "s2s")]) == 0
    assert (tmp_path / "s2s" / "alignment.png").stat().st_size > 10_000
    assert "exact match on 1000 held-out strings" in capsys.readouterr().out
