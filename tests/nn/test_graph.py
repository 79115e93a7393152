"""GATConv: equal to PyTorch Geometric's GATConv with the same weights; awkward graphs."""

import pytest
import torch

from attnlab.nn.graph import GATConv, prepare_edges, segment_softmax

pyg = pytest.importorskip("torch_geometric.nn", reason="PyTorch Geometric is a test dependency")


def _graph(n=12, e=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = set()
    while len(pairs) < e:
        s, d = torch.randint(0, n, (2,), generator=g).tolist()
        if s != d:
            pairs.add((s, d))
    ei = torch.tensor(sorted(pairs)).T
    return torch.randn(n, 7, generator=g, dtype=torch.float64), ei


def _alpha_by_edge(edges, alpha):
    return {(int(s), int(d)): alpha[k] for k, (s, d) in enumerate(edges.T)}


@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("heads", [1, 8])
def test_equals_pytorch_geometric(heads, concat, self_loops):
    x, ei = _graph()
    ours = GATConv(7, 5, heads=heads, concat=concat, add_self_loops=self_loops).double()
    theirs = pyg.GATConv(7, 5, heads=heads, concat=concat, add_self_loops=self_loops).double()
    with torch.no_grad():
        ours.bias.normal_()                              # a non-zero bias is compared too
    theirs.load_state_dict(ours.state_dict())            # same parameter names and shapes
    _compare(ours, theirs, x, ei)                        # outputs, coefficients, gradients


def test_attention_sums_to_one_per_target_and_dropout_only_in_training():
    x, ei = _graph()
    conv = GATConv(7, 4, heads=3, dropout=0.5).double().eval()
    _, (edges, alpha) = conv(x, ei, return_attention_weights=True)
    sums = torch.zeros(12, 3, dtype=torch.float64).index_add_(0, edges[1], alpha)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    assert torch.equal(conv(x, ei), conv(x, ei))         # eval: deterministic
    conv.train()
    assert not torch.equal(conv(x, ei), conv(x, ei))
    # In training the returned coefficients are the ones applied (after dropout), as PyG's:
    # out == sum_j alpha_ij W x_j + bias holds for what is returned.
    torch.manual_seed(3)
    out, (edges, alpha) = conv(x, ei, return_attention_weights=True)
    assert (alpha == 0).any() and not torch.allclose(
        torch.zeros(12, 3, dtype=torch.float64).index_add_(0, edges[1], alpha), sums)
    z = conv.lin(x).view(12, 3, 4)
    manual = torch.zeros(12, 3, 4, dtype=torch.float64).index_add_(
        0, edges[1], z[edges[0]] * alpha.unsqueeze(-1)).reshape(12, 12) + conv.bias
    torch.testing.assert_close(out, manual)


def test_isolated_nodes_self_loops_and_duplicates():
    x = torch.randn(5, 3)
    ei = torch.tensor([[0, 1, 1, 2, 2], [1, 2, 2, 2, 0]])   # duplicate 1->2, self-loop 2->2
    edges = prepare_edges(ei, 5, self_loops=True)
    assert sorted(map(tuple, edges.T.tolist())) == sorted(
        [(0, 1), (1, 2), (2, 0), (0, 0), (1, 1), (2, 2), (3, 3), (4, 4)])   # one loop each
    no_loops = prepare_edges(ei, 5, self_loops=False)
    assert no_loops.shape[1] == 4                           # duplicate merged, loop kept
    conv = GATConv(3, 2, heads=2, add_self_loops=False, bias=False)
    out = conv(x, ei)
    assert torch.isfinite(out).all()
    assert torch.equal(out[3], torch.zeros(4)) and torch.equal(out[4], torch.zeros(4))
    # With self-loops an isolated node attends only to itself: alpha = 1.
    _, (edges, alpha) = GATConv(3, 2, heads=2)(x, ei, return_attention_weights=True)
    iso = (edges[0] == 3) & (edges[1] == 3)
    assert torch.equal(alpha[iso], torch.ones(1, 2))
    # Duplicated edges give the same result as the edge once.
    assert torch.equal(conv(x, ei), conv(x, torch.tensor([[0, 1, 2, 2], [1, 2, 2, 0]])))


@pytest.mark.parametrize("ei, exc, words", [
    (torch.tensor([[0, 5], [1, 2]]), ValueError, "refers to node 5, but there are 5 nodes"),
    (torch.tensor([[0, -1], [1, 2]]), ValueError, "refers to node -1"),
    (torch.tensor([[0, 1, 2]]), ValueError, r"shape \(2, E\)"),
    (torch.tensor([[0.0, 1.0], [1.0, 2.0]]), TypeError, "integer node ids"),   # a wrong dtype
])
def test_bad_edge_lists(ei, exc, words):
    with pytest.raises(exc, match=words):
        GATConv(3, 2)(torch.randn(5, 3), ei)


def test_segment_softmax_large_scores_and_empty_groups():
    s = torch.tensor([[1000.0], [999.0], [-5.0]])
    p = segment_softmax(s, torch.tensor([0, 0, 2]), 4)
    torch.testing.assert_close(p[:, 0], torch.tensor([1 / (1 + torch.e ** -1),
                                                      1 - 1 / (1 + torch.e ** -1), 1.0]))


def _pyg_copy(ours, theirs):
    theirs.load_state_dict(ours.state_dict())           # same parameter names and shapes
    return theirs


def _compare(ours, theirs, *args, **kw):
    out, (edges, alpha) = ours(*args, return_attention_weights=True, **kw)
    ref, (ref_edges, ref_alpha) = theirs(*args, return_attention_weights=True, **kw)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    if torch.equal(edges, ref_edges):            # PyG's order (edge features, bipartite)
        torch.testing.assert_close(alpha, ref_alpha, rtol=1e-12, atol=1e-12)
    else:                                        # a set of unique edges, sorted by target
        a, b = _alpha_by_edge(edges, alpha), _alpha_by_edge(ref_edges, ref_alpha)
        assert a.keys() == b.keys() and len(a) == edges.shape[1]
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-12, atol=1e-12)
    params = list(ours.parameters())
    g1 = torch.autograd.grad(out.square().sum(), params, allow_unused=True)
    g2 = torch.autograd.grad(ref.square().sum(), [dict(theirs.named_parameters())[k]
                                                  for k, _ in ours.named_parameters()],
                             allow_unused=True)
    for u, v, p in zip(g1, g2, params):                  # unused in both: the same zeros
        torch.testing.assert_close(torch.zeros_like(p) if u is None else u,
                                   torch.zeros_like(p) if v is None else v,
                                   rtol=1e-10, atol=1e-12)


FILLS = ["mean", "add", "max", 0.5, torch.tensor([1.0, -2.0, 0.0])]


@pytest.mark.parametrize("fill_value", FILLS, ids=["mean", "add", "max", "float", "tensor"])
@pytest.mark.parametrize("cls", ["GATConv", "GATv2Conv"])
def test_edge_features_equal_pyg(cls, fill_value):
    x, ei = _graph()
    attr = torch.randn(ei.shape[1], 3, generator=torch.Generator().manual_seed(5),
                       dtype=torch.float64)
    fill = fill_value.double() if isinstance(fill_value, torch.Tensor) else fill_value
    ours = getattr(__import__("attnlab.nn", fromlist=[cls]), cls)(
        7, 5, heads=3, edge_dim=3, fill_value=fill).double()
    theirs = _pyg_copy(ours, getattr(pyg, cls)(7, 5, heads=3, edge_dim=3,
                                               fill_value=fill).double())
    _compare(ours, theirs, x, ei, attr)


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("cls", ["GATConv", "GATv2Conv"])
def test_residual_and_bipartite_equal_pyg(cls, concat):
    from attnlab import nn as anl

    x, ei = _graph()
    ours = getattr(anl, cls)(7, 4, heads=2, concat=concat, residual=True).double()
    theirs = _pyg_copy(ours, getattr(pyg, cls)(7, 4, heads=2, concat=concat,
                                               residual=True).double())
    _compare(ours, theirs, x, ei)
    # bipartite: 12 source nodes with 7 features -> 5 target nodes with 6 features
    g = torch.Generator().manual_seed(1)
    x_src, x_dst = x, torch.randn(5, 6, generator=g, dtype=torch.float64)
    bi = torch.stack([torch.randint(0, 12, (20,), generator=g),
                      torch.randint(0, 5, (20,), generator=g)])
    for loops in (False, True):
        ours = getattr(anl, cls)((7, 6), 4, heads=2, concat=concat, residual=True,
                                 add_self_loops=loops).double()
        theirs = _pyg_copy(ours, getattr(pyg, cls)((7, 6), 4, heads=2, concat=concat,
                                                   residual=True,
                                                   add_self_loops=loops).double())
        # PyG's GATv2Conv takes no size= (ours does, as GATConv)
        _compare(ours, theirs, (x_src, x_dst), bi, **({"size": (12, 5)}
                                                      if cls == "GATConv" else {}))
    # PyG's bipartite call without target features (its own tests): the scores use the
    # sources only, the targets' number comes from size, and no residual is added.
    for loops in (False, True):
        for size in ((12, 5), None):
            ours = getattr(anl, cls)((7, 6), 4, heads=2, concat=concat,
                                     add_self_loops=loops).double()
            theirs = _pyg_copy(ours, getattr(pyg, cls)((7, 6), 4, heads=2, concat=concat,
                                                       add_self_loops=loops).double())
            if cls == "GATv2Conv":              # its score needs both ends: refused, as PyG
                with pytest.raises(ValueError, match="GATv2Conv needs the target"):
                    ours((x_src, None), bi)
                continue
            _compare(ours, theirs, (x_src, None), bi, **({"size": size} if size else {}))


@pytest.mark.parametrize("share_weights", [False, True])
def test_gatv2_equals_pyg(share_weights):
    from attnlab.nn import GATv2Conv

    x, ei = _graph()
    for self_loops in (True, False):
        ours = GATv2Conv(7, 5, heads=4, share_weights=share_weights,
                         add_self_loops=self_loops).double()
        with torch.no_grad():
            ours.bias.normal_()
            ours.lin_l.bias.normal_()
        theirs = _pyg_copy(ours, pyg.GATv2Conv(7, 5, heads=4, share_weights=share_weights,
                                               add_self_loops=self_loops).double())
        out, ref = ours(x, ei), theirs(x, ei)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_gatv2_attention_is_dynamic_where_gat_is_static():
    # GAT's ranking of neighbours j is the same for every target i (a_src' z_j is shared);
    # GATv2's can differ by target (Brody et al. 2022, theorem 1). Complete bipartite K(4, 3).
    from attnlab.nn import GATv2Conv

    torch.manual_seed(0)
    x_src, x_dst = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    ei = torch.cartesian_prod(torch.arange(4), torch.arange(3)).T
    rankings = {}
    for name, conv in (("gat", GATConv((3, 3), 8, add_self_loops=False)),
                       ("gatv2", GATv2Conv((3, 3), 8, add_self_loops=False))):
        _, (edges, alpha) = conv.double()((x_src, x_dst), ei, return_attention_weights=True)
        best = {int(i): int(edges[0][edges[1] == i][alpha[edges[1] == i, 0].argmax()])
                for i in range(3)}
        rankings[name] = set(best.values())
    assert len(rankings["gat"]) == 1 and len(rankings["gatv2"]) > 1


def test_bad_graph_inputs():
    x, ei = _graph()
    with pytest.raises(ValueError, match="built without edge_dim"):
        GATConv(7, 5)(x, ei, torch.randn(ei.shape[1], 3))
    with pytest.raises(ValueError, match="edge_attr must have shape"):
        GATConv(7, 5, edge_dim=3)(x, ei, torch.randn(ei.shape[1], 4))
    with pytest.raises(ValueError, match="5 target nodes"):
        GATConv((7, 7), 5)((x, x[:5]), ei)
