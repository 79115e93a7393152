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
    out, (edges, alpha) = ours(x, ei, return_attention_weights=True)
    ref, (ref_edges, ref_alpha) = theirs(x, ei, return_attention_weights=True)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    a, b = _alpha_by_edge(edges, alpha), _alpha_by_edge(ref_edges, ref_alpha)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-12, atol=1e-12)
    # Gradients too.
    g1 = torch.autograd.grad(out.square().sum(), list(ours.parameters()))
    g2 = torch.autograd.grad(ref.square().sum(), [dict(theirs.named_parameters())[k]
                                                  for k, _ in ours.named_parameters()])
    for u, v in zip(g1, g2):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)


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
