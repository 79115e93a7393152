"""explain shows every step on real numbers: X projected to Q, K, V; scores, scaled and masked
scores apart; the softmax's own steps; multi-head attention of a real layer with its numbers;
additive scoring with its parameters; saturation without the scale; all at 100 columns."""

from __future__ import annotations

import io
import math

import pytest
import torch
from rich.console import Console

from attnlab.cli import main
from attnlab.cli.explain import render, render_additive, render_heads, render_saturation
from attnlab.explain import (
    additive_walk,
    embedded_example,
    example,
    heads_walk,
    inputs_for,
    saturation,
    unscaled_note,
    walk,
)


@pytest.fixture(scope="module")
def layer_walk():
    return heads_walk("The cat sat on the mat.", layer=1)


def _printed(draw) -> str:
    buf = io.StringIO()
    draw(Console(file=buf, width=100, force_terminal=False, color_system=None))
    return buf.getvalue()


def test_heads_walk_rebuilds_the_layer_output_from_its_heads(layer_walk):
    hw = layer_walk
    assert len(hw.heads) == 12 and hw.concat.shape == (9, 384) and hw.ok
    assert hw.checks[0].passed                       # within 1e-10 of the module, float64
    assert (hw.out - hw.reference).abs().max() < 1e-10
    assert torch.equal(hw.concat[:, 32:64], hw.heads[1].o)


def test_every_step_has_its_numbers_and_fits_100_columns(layer_walk):
    """At 100 columns nothing is cut (no ellipsis), no line is wider, and every step of the
    single-head walk and of the multi-head walk prints numbers."""
    ex = embedded_example()
    wt = walk(ex.tokens, ex.q, ex.k, ex.v, causal=True, inputs=ex)
    texts = {
        "walk": _printed(lambda c: render(wt, c)),
        "heads": _printed(lambda c: render_heads(layer_walk, c)),
        "additive": _printed(lambda c: render_additive(additive_walk(wt), c)),
        "saturation": _printed(lambda c: render_saturation(saturation(), c)),
        "long": _printed(lambda c: render(walk(*example(n=40, d=8, seed=2)), c)),
    }
    for name, text in texts.items():
        assert "…" not in text, name
        assert max(len(line) for line in text.splitlines()) <= 100, name
    walk_steps = ("0. X (6 x 8)", "W_Q (8 x 4)", "Q = X W_Q", "1. S = Q K^T", "2. S * scale",
                  "3. masked", "4a. E = exp(s - m)", "4b. per row: m = row max", "4c. A = E / l",
                  "5. O = A V")
    for step in walk_steps:
        assert step in texts["walk"], step
    for step in ("X (9 x 384)", "Q (9 x 384)", "Q_1 = Q[:, 32:64]", "A_11 (9 x 9)",
                 "O_0 = A_0 V_0", "columns 30-33", "concat W_o^T + b_o",
                 "the layer's own attention output", "row argmax"):
        assert step in texts["heads"], step
    assert "[SEP]" in texts["heads"] and "[CL" in texts["heads"]
    for step in ("W_q (4 x 4)", "W_k (4 x 4)", "b and v", "A = softmax of each row (additive)"):
        assert step in texts["additive"]
    assert "columns 0-" in texts["long"]               # 40 keys: column blocks, not cuts
    assert "NOTE" not in texts["walk"]                 # notes only with --verbose
    assert "NOTE" in _printed(lambda c: render(wt, c, verbose=True))


def test_the_built_in_x_comes_from_the_embedded_model():
    ex = embedded_example()
    assert ex.tokens == ["the", "cat", "sat", "on", "the", "mat"]
    assert torch.equal(ex.x[0], ex.x[4])             # the same token, the same vector
    assert torch.equal(ex.x, torch.round(ex.x * 10) / 10)
    tokens, q, k, v = example()
    assert torch.allclose(q, ex.x @ ex.w_q) and torch.allclose(v, ex.x @ ex.w_v)
    assert inputs_for(n=5, d=3, seed=1).x.shape == (5, 6)


def test_the_softmax_steps_are_the_softmax():
    ex = inputs_for(n=7, d=4, seed=3)
    wt = walk(ex.tokens, ex.q, ex.k[:5], ex.v[:5], causal=True, inputs=ex)  # N_q > N_k
    live = wt.keep.any(-1)
    assert not bool(live[:2].any())                  # the first two queries see no key
    assert torch.allclose(wt.exps[live].amax(-1), torch.ones(int(live.sum()), dtype=wt.a.dtype))
    assert torch.allclose(wt.a[live], wt.exps[live] / wt.row_sum[live, None])
    ref = torch.logsumexp(wt.scaled[live], -1)
    assert torch.allclose(wt.lse[live], ref) and bool(torch.isneginf(wt.lse[~live]).all())
    assert wt.ok


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
    assert "without the scale" in out and "At D_k = 256" in out


def test_unscaled_note_shows_a_sharper_softmax_and_a_causal_uniform():
    tokens, q, k, v = example(n=16, d=64, seed=1)
    with_scale, without = unscaled_note(walk(tokens, q, k, v))
    peak = [float(line.split("largest weight per row ")[1].split()[0])
            for line in (with_scale, without)]
    assert peak[1] > peak[0]
    # under a causal mask row i sees i + 1 keys: the uniform reference is the mean of
    # log(i + 1), not log N
    (line, _) = unscaled_note(walk(tokens, q, k, v, causal=True))
    uniform = float(line.split("visible keys: ")[1].rstrip(")"))
    assert abs(uniform - sum(math.log(i + 1) for i in range(16)) / 16) < 0.01


def test_saturation_without_the_scale():
    """At D_k = 256 the unscaled softmax puts most of a row on one key and its Jacobian
    shrinks; with the scale it does not depend on D_k."""
    sat = saturation(256)
    (_, std_s, peak_s, _, _, jac_s), (_, std_u, peak_u, _, _, jac_u) = sat.rows
    assert abs(std_s - 1) < 0.2 and std_u > 12
    assert peak_u > 0.9 > peak_s and jac_u < 0.5 * jac_s
