"""explain beyond one head: multi-head attention of a real layer step by step, additive scoring
beside the dot product, and what the 1/sqrt(D_k) scale prevents."""

from __future__ import annotations

from attnlab.cli import main
from attnlab.explain import additive_walk, example, heads_walk, unscaled_note, walk


def test_heads_walk_rebuilds_the_layer_output_from_its_heads():
    hw = heads_walk("The cat sat on the mat.", layer=1)
    assert len(hw.heads) == 12 and hw.concat.shape == (9, 384) and hw.ok
    assert hw.checks[0].passed                       # within 1e-10 of the module, float64


def test_explain_heads_command(capsys):
    assert main(["explain", "--heads", "--layer", "0"]) == 0
    out = capsys.readouterr().out
    for step in ("1. project", "2. split", "3. each head", "4. concatenate", "5. output projection",
                 "equals the layer's attention output"):
        assert step in out
    assert "FAIL" not in out


def test_additive_scoring_beside_the_dot_product(capsys, tmp_path):
    tokens, q, k, v = example()
    aw = additive_walk(walk(tokens, q, k, v, causal=True))
    assert aw.checks[0].passed
    assert (aw.a.sum(-1) - 1).abs().max() < 1e-12 and (aw.a.triu(1) == 0).all()
    assert main(["explain", "--additive", "--no-scale", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "additive (Bahdanau)" in out and "formula = AdditiveAttention" in out
    assert "without the scale" in out


def test_unscaled_note_shows_a_sharper_softmax():
    tokens, q, k, v = example(n=16, d=64, seed=1)
    with_scale, without = unscaled_note(walk(tokens, q, k, v))
    peak = [float(line.split("largest weight per row ")[1].split()[0])
            for line in (with_scale, without)]
    assert peak[1] > peak[0]
