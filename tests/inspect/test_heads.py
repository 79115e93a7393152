"""Head detectors and ablation on constructed inputs with known answers."""

import pytest
import torch

from attnlab.inspect.ablation import ablate_heads, attention_modules, head_importance, head_means
from attnlab.inspect.heads import (
    copying_score,
    duplicate_token_scores,
    induction_scores,
    previous_token_scores,
)
from attnlab.nn import MultiheadAttention


def _offset_map(n, offset):
    """Every query i >= offset puts all its weight on key i - offset; the others on key 0."""
    m = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        m[i, i - offset if i >= offset else 0] = 1.0
    return m


def test_scores_of_constructed_heads():
    L, n = 5, 11                        # [BOS] a1..a5 a1..a5
    ids = torch.tensor([0, 7, 3, 9, 4, 8, 7, 3, 9, 4, 8])
    prev, dup, ind = _offset_map(n, 1), _offset_map(n, L), _offset_map(n, L - 1)
    maps = torch.stack([torch.stack([prev, dup, ind])])           # (1, 3, n, n)
    p = previous_token_scores(maps)
    d = duplicate_token_scores(maps, ids)
    k = induction_scores(maps, ids)
    assert p[0].tolist() == pytest.approx([1.0, 0.1, 0.1])   # query 1 looks at key 0 = i - 1
    assert d[0].tolist() == pytest.approx([0.0, 1.0, 0.0])
    assert k[0].tolist() == pytest.approx([0.0, 0.0, 1.0])
    # batched input averages over sequences
    both = torch.stack([maps, maps])
    assert torch.allclose(induction_scores(both, torch.stack([ids, ids])), k)


def test_detector_inputs_are_checked():
    with pytest.raises(ValueError, match="ids of shape"):
        induction_scores(torch.rand(1, 1, 4, 4), torch.arange(5))
    with pytest.raises(ValueError, match="self-attention"):
        previous_token_scores(torch.rand(1, 1, 4, 5))


def test_copying_score():
    assert copying_score(torch.eye(6)) == pytest.approx(1.0)
    assert copying_score(-torch.eye(6)) == pytest.approx(-1.0)
    perm = torch.eye(4)[[1, 0, 3, 2]]                  # swaps: eigenvalues +1, -1, +1, -1
    assert copying_score(perm) == pytest.approx(0.0, abs=1e-12)


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attn = MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_zero_and_mean_ablation_edit_one_head():
    model = _TwoHeads().eval()
    x = torch.randn(3, 5, 8)
    seen = []
    h = model.attn.out_proj.register_forward_hook(lambda m, a, o: seen.append(a[0].clone()))
    with torch.no_grad():
        model(x)
        with ablate_heads(model, [(0, 1)]):
            model(x)
        means = head_means(model, lambda: model(x))
        with ablate_heads(model, [(0, 0)], mode="mean", means=means):
            model(x)
    h.remove()
    intact, zeroed, meaned = seen[0], seen[1], seen[-1]
    assert torch.equal(zeroed[..., :4], intact[..., :4]) and not zeroed[..., 4:].any()
    assert torch.allclose(meaned[..., :4], intact[..., :4].reshape(-1, 4).mean(0).expand(3, 5, 4),
                          atol=1e-6)
    assert torch.equal(meaned[..., 4:], intact[..., 4:])
    assert len(attention_modules(model)) == 1
    imp = head_importance(model, lambda: model(x).pow(2).sum().item())
    assert imp.shape == (1, 2) and (imp != 0).all()
    with pytest.raises(ValueError, match="does not exist"):
        with ablate_heads(model, [(0, 2)]):
            pass
    with pytest.raises(ValueError, match="means="):
        with ablate_heads(model, [(0, 0)], mode="mean"):
            pass
