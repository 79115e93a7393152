"""Metrics and taxonomy on synthetic maps with known answers; attribution on hand-made cases."""

import math

import numpy as np
import pytest
import torch

from attnlab.inspect.attribution import _with_residual, flow, flow_from, gradient_weighted, rollout
from attnlab.inspect.metrics import embed_2d, head_metrics, js_distances, layer_distance_summary
from attnlab.inspect.taxonomy import label_heads

N = 7
TOKENS = ["[CLS]", "the", "cat", "sat", ",", "down", "[SEP]"]


def _maps(*heads):
    return torch.stack([torch.stack(list(heads))])                  # (1, H, n, n)


def identity():
    return torch.eye(N, dtype=torch.float64)


def previous():
    a = torch.zeros(N, N, dtype=torch.float64)
    a[0, 0] = 1.0
    for i in range(1, N):
        a[i, i - 1] = 1.0
    return a


def uniform():
    return torch.full((N, N), 1.0 / N, dtype=torch.float64)


def to_sep():
    a = torch.zeros(N, N, dtype=torch.float64)
    a[:, N - 1] = 1.0
    return a


def test_known_answers():
    m = head_metrics(_maps(identity(), previous(), uniform(), to_sep()), TOKENS)
    assert m.self_mass[0, 0] == 1 and m.prev_mass[0, 0] == 0 and m.max_weight[0, 0] == 1
    assert m.entropy_ratio[0, 0] < 1e-5
    assert m.prev_mass[0, 1] == pytest.approx(6 / 7) and m.prev_argmax[0, 1] == 1
    assert m.entropy_ratio[0, 2] == pytest.approx(1.0, abs=1e-6)
    assert m.entropy[0, 2] == pytest.approx(math.log(N), abs=1e-6)
    assert m.max_weight[0, 2] == pytest.approx(1 / N)
    assert m.sep[0, 3] == 1 and m.cls[0, 3] == 0
    assert m.punct[0, 2] == pytest.approx(1 / N)                   # one "," among seven keys
    assert m.sink_mass[0, 2] == pytest.approx(1 / N)
    assert m.local_uniform[0, 2] == 1.0                # a band of 16 covers 7 tokens


def test_taxonomy_labels_and_flags():
    m = head_metrics(_maps(identity(), previous(), uniform(), to_sep(), to_sep()), TOKENS)
    maps = _maps(identity(), previous(), uniform(), to_sep(), to_sep())
    dist = js_distances(maps)
    tax = label_heads(m, dist)
    assert tax.labels[0] == ["self", "previous token", "broad", "special token", "special token"]
    assert (0, 2) in tax.near_uniform
    assert ((0, 3), (0, 4), 0.0) in [(a, b, round(d, 6)) for a, b, d in tax.duplicates]


def test_block_label_for_sentence_pairs():
    seg = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    a = (seg[:, None] == seg[None, :]).double()
    a = a / a.sum(-1, keepdim=True)
    m = head_metrics(_maps(a), TOKENS, segments=seg)
    assert m.within_segment[0, 0] == pytest.approx(1.0)
    assert label_heads(m).labels[0][0] == "block"


def test_js_distance_properties_and_layer_summary():
    maps = torch.stack([torch.stack([identity(), identity()]), torch.stack([uniform(), to_sep()])])
    d = js_distances(maps)                                          # (4, 4)
    assert torch.allclose(d, d.T) and (d.diagonal() < 1e-6).all()
    assert d[0, 1] < 1e-6 and 0 < d[0, 2] <= 1
    summary = layer_distance_summary(d, heads=2)
    assert summary["same_layer"] < summary["cross_layer"]
    xy = embed_2d(d)
    assert xy.shape == (4, 2)


def test_embed_2d_recovers_planar_distances_and_is_deterministic():
    points = torch.randn(9, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d = torch.cdist(points, points)
    xy = embed_2d(d)
    assert torch.allclose(torch.cdist(xy, xy), d, atol=1e-10)     # exact for planar distances
    assert torch.equal(xy, embed_2d(d.clone()))
    assert embed_2d(torch.zeros(1, 1)).shape == (1, 2)


def test_rollout_hand_computed_two_layers():
    a1 = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)   # both attend to token 0
    a2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)   # both attend to token 1
    maps = torch.stack([a1[None], a2[None]])                          # (2 layers, 1 head, 2, 2)
    # Â1 = 0.5 A1 + 0.5 I = [[1, 0], [0.5, 0.5]];  Â2 = [[0.5, 0.5], [0, 1]]
    expected = torch.tensor([[0.5, 0.5], [0, 1.0]], dtype=torch.float64) @ torch.tensor(
        [[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    assert torch.allclose(rollout(maps), expected)
    assert torch.allclose(rollout(maps).sum(-1), torch.ones(2, dtype=torch.float64))


def test_flow_on_a_chain_and_its_guard():
    maps = torch.stack([torch.eye(3, dtype=torch.float64)[None]] * 2)   # attention to self only
    f = flow(maps)
    assert torch.allclose(f, torch.eye(3, dtype=torch.float64))         # nothing mixes
    eye = torch.stack([torch.eye(40, dtype=torch.float64)[None]])     # 40 tokens
    with pytest.raises(ValueError, match="more than the 32 it allows with scipy; use flow_from"
                       .replace(";", ":")):
        flow(eye, solver="scipy")
    assert torch.equal(flow(eye), torch.eye(40, dtype=torch.float64))  # numba: up to 64
    with pytest.raises(ValueError, match="more than the 64 it allows with numba"):
        flow(torch.stack([torch.eye(65, dtype=torch.float64)[None]]))


def _networkx_flow(maps, residual):
    """The textbook construction with networkx's exact float max-flow (the peer's procedure)."""
    import networkx as nx

    n_layers, _, n, _ = maps.shape
    g = nx.DiGraph()
    g.add_nodes_from((layer, j) for layer in range(n_layers + 1) for j in range(n))
    for layer in range(n_layers):
        a = _with_residual(maps[layer].mean(0), residual)
        for i in range(n):
            for j in range(n):
                if a[i, j] > 0:
                    g.add_edge((layer, j), (layer + 1, i), capacity=float(a[i, j]))
    out = torch.tensor([[nx.maximum_flow_value(g, (0, j), (n_layers, i)) for j in range(n)]
                        for i in range(n)], dtype=torch.float64)
    return out / out.sum(-1, keepdim=True).clamp_min(1e-12)


@pytest.mark.parametrize("solver", ["numba", "scipy"])
@pytest.mark.parametrize("residual", [0.5, 0.0])
def test_flow_equals_exact_max_flow_within_the_integer_scaling(residual, solver):
    g = torch.Generator().manual_seed(0)
    maps = torch.softmax(3 * torch.randn(3, 4, 9, 9, generator=g, dtype=torch.float64), -1)
    if residual == 0.0:
        maps[:, :, :, 4] = 0.0          # no query attends to key 4: it has no way in or out
        maps = maps / maps.sum(-1, keepdim=True)
    got, want = flow(maps, residual, solver=solver), _networkx_flow(maps, residual)
    # capacities are rounded to multiples of 2^-20: a few 1e-7 at most
    assert (got - want).abs().max() < 1e-6
    for i in (0, 4, 8):
        assert torch.allclose(flow_from(maps, i, residual, solver=solver), got[i], atol=1e-12)
    if residual == 0.0:
        assert (got[:, 4] == 0).all()


@pytest.mark.parametrize("layers,n", [(1, 5), (2, 1), (2, 7), (4, 40), (6, 70)])
def test_the_two_max_flow_solvers_give_the_same_integers(layers, n):
    # Every depth (one layer: no graph between source and sink), one token, and lengths past
    # the full-matrix limit; sharp and flat heads, and keys nobody attends to.
    from attnlab.inspect.attribution import _flow_capacities, _flows_into

    g = torch.Generator().manual_seed(layers * 100 + n)
    scores = torch.randn(layers, 2, n, n, generator=g, dtype=torch.float64)
    scores = scores * torch.tensor([0.5, 6.0], dtype=torch.float64)[:, None, None]
    if n > 2:
        scores[..., n // 2] = -torch.inf
    for residual in (0.5, 0.0):
        caps = _flow_capacities(torch.softmax(scores, -1), residual)
        for position in {0, n // 2, n - 1}:
            a, b = _flows_into(caps, position, "numba"), _flows_into(caps, position, "scipy")
            assert a.tolist() == b.tolist()


def test_flow_solver_is_checked():
    maps = torch.softmax(torch.randn(2, 1, 4, 4, dtype=torch.float64), -1)
    with pytest.raises(ValueError, match="solver must be 'numba' or 'scipy'"):
        flow_from(maps, 0, solver="networkx")


def test_gradient_weighted_known_answer():
    # One layer, one head: relevance adds (grad * A)+ to the identity.
    a = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    g = torch.tensor([[2.0, -1.0], [0.0, 4.0]], dtype=torch.float64)
    r = gradient_weighted([a[None]], [g[None]])
    expected = torch.eye(2, dtype=torch.float64) + torch.tensor([[0.5, 0.0], [0.0, 2.0]],
                                                                dtype=torch.float64)
    assert torch.allclose(r, expected)


def test_a_50_50_split_between_previous_and_next_token_is_neither():
    n = 6
    a = torch.zeros(1, 1, n, n, dtype=torch.float64)
    for i in range(n):
        nb = [j for j in (i - 1, i + 1) if 0 <= j < n]
        a[0, 0, i, nb] = 1.0 / len(nb)
    m = head_metrics(a, ["x"] * n)
    prev, nxt = m.prev_argmax, m.next_argmax
    # only the edge rows (one neighbour) have a single argmax
    assert float(prev) == pytest.approx(1 / 5) and float(nxt) == pytest.approx(1 / 5)


def test_punctuation_mass_counts_period_and_comma_as_clark_et_al():
    from attnlab.inspect.metrics import is_period_or_comma

    assert is_period_or_comma(".") and is_period_or_comma(",")
    assert not any(is_period_or_comma(c) for c in "!?-")


@pytest.mark.parametrize("n", [3, 65, 130])
def test_js_distances_numba_and_torch_agree(n):
    g = torch.Generator().manual_seed(n)
    scores = torch.randn(2, 3, n, n, generator=g) * torch.tensor([0.3, 2.0, 8.0])[:, None, None]
    scores[..., 0, 1:] = -torch.inf                       # a one-hot row: x log x at x = 0
    maps = torch.softmax(scores, -1)
    a, b = js_distances(maps, kernel="numba"), js_distances(maps, kernel="torch")
    assert a.shape == (6, 6) and torch.allclose(a, b, atol=2e-6)
    assert torch.allclose(js_distances(maps), b, atol=2e-6)
    with pytest.raises(ValueError, match="kernel must be"):
        js_distances(maps, kernel="scipy")


def test_inspect_flow_policy_with_and_without_numba(monkeypatch):
    from attnlab.inspect import metrics
    from attnlab.inspect.run import inspect_texts

    text = "attention " * 148                                   # 150 tokens with [CLS], [SEP]
    ins = inspect_texts([(text, None)])
    assert ins.flow_from is not None and ins.flow_from.shape == (150,)
    assert abs(float(ins.flow_from.sum()) - 1) < 1e-9
    assert any("flow into position 0 ([CLS]) is shown" in note for note in ins.notes)
    middle = "attention " * 48                               # 50 tokens: the full matrix fits
    ins = inspect_texts([(middle, None)])
    assert ins.flow.shape == (50, 50) and torch.equal(ins.flow_from, ins.flow[0])
    monkeypatch.setattr(metrics, "numba_installed", lambda: False)
    ins = inspect_texts([(text, None)])
    assert ins.flow_from is None
    assert any("pip install 'attnlab[fast]'" in note for note in ins.notes)
    ins = inspect_texts([(middle, None)])                   # scipy: the matrix only up to 32
    assert ins.flow is None and ins.flow_from.shape == (50,)
    assert any("more than the 32 of the full matrix" in note for note in ins.notes)


def test_model_grid_scales_each_map_and_pools_long_ones_keeping_peaks():
    from attnlab.plots.inspect import GRID_CELL, grid_mosaic

    n = 300
    uniform = torch.full((n, n), 1.0 / n)
    previous = torch.eye(n).roll(-1, 1)                     # one-hot rows: a thin diagonal
    maps = torch.stack([uniform, previous])[None]           # (1 layer, 2 heads, n, n)
    mosaic, cell, step = grid_mosaic(maps)
    assert cell == GRID_CELL and mosaic.shape == (cell, 2 * step - (step - cell))
    diffuse, sharp = mosaic[:, :cell], mosaic[:, step:step + cell]
    assert np.allclose(diffuse, 1.0)                        # its own largest weight: as bright
    assert (sharp.max(1) == 1.0).all()                      # the diagonal survives the pooling
    assert np.isnan(mosaic[:, cell:step]).all()             # the gap between heads
    small, cell, _ = grid_mosaic(maps[..., :12, :12])
    assert cell == 12                                       # short maps at their own size
