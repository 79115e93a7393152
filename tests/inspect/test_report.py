"""attnlab inspect end to end: the CLI writes figures and a report that works offline in real
headless Chromium, escapes user text, and opens on a clicked head."""


import pytest

from attnlab.cli import main

# One worker builds the report fixture (make test runs xdist with --dist loadgroup).
pytestmark = pytest.mark.xdist_group("inspect-report")


def test_without_figures_only_the_report(tmp_path):
    assert main(["inspect", "Short text.", "--out", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_corpus_mode_and_usage_errors(tmp_path, capsys):
    corpus = tmp_path / "texts.txt"
    corpus.write_text("The first sentence.\nA second one\twith its pair.\n\nThird!\n")
    assert main(["inspect", "--file", str(corpus), "--out", str(tmp_path / "o")]) == 0
    assert "on 3 text(s)" in " ".join(capsys.readouterr().out.split())
    assert main(["inspect", "x", "--file", str(corpus)]) == 2
    assert main(["inspect", "--file", str(tmp_path / "missing.txt")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert main(["inspect", "x", "--model", str(tmp_path)]) == 2


def test_the_weight_code_keeps_every_weight_within_one_percent_or_1e_6():
    import torch

    from attnlab.inspect.report import decode_weights, encode_weights

    g = torch.Generator().manual_seed(0)
    w = torch.cat([torch.tensor([0.0, 1e-7, 1e-6, 5e-5, 9.99e-5, 1e-4, 1.16e-3, 0.5, 1.0, 3.7]),
                   torch.rand(200_000, generator=g) ** 8])
    back = decode_weights(encode_weights(w))
    w = w.double()
    assert ((back - w).abs() <= torch.maximum(0.01 * w, torch.full_like(w, 1e-6))).all()
