"""attention_stats: every statistic equals the same statistic computed from the dense float64
weights of the reference backend, within 1e-5 in float32, at lengths that cross the tiles, for
every mask attnlab takes (causal, window, padding, a mask function, GQA, softcap, sinks,
temperature, a float bias); fully masked rows give defined values, never NaN."""

import pytest
import torch

from attnlab import attention, masks
from attnlab.core.stats import FIELDS, attention_stats, reference_stats

BLOCK = (16, 32)                 # small tiles: the lengths below cross many of them


def _qkv(b, h, n_q, n_k, d=8, h_kv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    h_kv = h_kv or h
    return (torch.randn(b, h, n_q, d, generator=g, dtype=torch.float64) * 1.5,
            torch.randn(b, h_kv, n_k, d, generator=g, dtype=torch.float64) * 1.5)


def _gold(q, k, sinks=None, **kw):
    v = torch.zeros(*k.shape[:-1], 1, dtype=k.dtype)
    res = attention(q, k, v, backend="reference", return_weights=True, return_lse=True,
                    sinks=sinks, **kw)
    share = None
    if sinks is not None:
        share = (1 - res.weights.sum(-1)).clamp_min(0)
        share = torch.where(torch.isneginf(res.lse), torch.zeros_like(share), share)
    return res, share


CASES = {
    "plain": lambda s: {},
    "causal": lambda s: {"causal": True},
    "window (20, 5)": lambda s: {"window": (20, 5)},
    "causal + window 30": lambda s: {"causal": True, "window": 30},
    "key padding, one sequence empty": lambda s: {
        "mask": masks.key_padding(torch.tensor([max(s[3] - 9, 1), 0]))},
    "segments": lambda s: {"mask": masks.segments(torch.arange(s[2]) * 3 // s[2],
                                                  torch.arange(s[3]) * 3 // s[3])},
    "softcap 3, temperature 0.7": lambda s: {"softcap": 3.0, "temperature": 0.7},
    "float bias": lambda s: {"mask": torch.randn(s[2], s[3], dtype=torch.float64,
                                                 generator=torch.Generator().manual_seed(5))},
}
SHAPES = [(2, 2, 1, 1), (2, 2, 129, 129), (2, 2, 70, 33), (1, 2, 45, 100)]   # N_q > N_k too


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_every_statistic_equals_the_dense_weights(shape, case):
    q, k = _qkv(*shape)
    kw = CASES[case](shape)
    gold, _ = _gold(q, k, **kw)
    want = reference_stats(gold.weights, lse=gold.lse, sink_keys=3, band=7)
    got = attention_stats(q.float(), k.float(), sink_keys=3, band=7, block=BLOCK,
                          **{a: (b.float() if isinstance(b, torch.Tensor) and b.is_floating_point()
                                 else b) for a, b in kw.items()})
    for name in FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert torch.isfinite(a.double()).all() or name == "lse", name
        if name == "argmax":
            top = gold.weights.max(-1).values
            picked = gold.weights.gather(-1, a.clamp_min(0)[..., None])[..., 0]
            assert torch.allclose(picked, top, atol=1e-6) and torch.equal(a < 0, b < 0), name
            continue
        if name == "tied":                  # random scores: no two keys share a row's largest
            assert torch.equal(a, b) and not bool(a.any()), name
            continue
        both_inf = torch.isinf(a.double()) & torch.isinf(b)
        err = torch.where(both_inf, 0.0, (a.double() - b).abs())
        scale = 1.0 if name != "distance" and name != "received" else max(float(b.abs().max()), 1)
        assert float(err.max()) <= 1e-5 * scale, (name, float(err.max()))


@pytest.mark.parametrize("n", [1, 129, 300])
def test_grouped_query_heads_and_sinks(n):
    q, k = _qkv(2, 4, n, n, h_kv=2, seed=3)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64)
    gold, share = _gold(q, k, sinks=sinks, causal=True, enable_gqa=True)
    want = reference_stats(gold.weights, lse=gold.lse, sink_weight=share)
    got = attention_stats(q.float(), k.float(), causal=True, enable_gqa=True,
                          sinks=sinks.float(), block=BLOCK)
    for name in ("lse", "entropy", "max_weight", "sink_mass", "prev_mass", "local_mass"):
        torch.testing.assert_close(getattr(got, name).double(), getattr(want, name),
                                   atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(got.received.double(), want.received, atol=1e-4, rtol=1e-5)


def test_fully_masked_rows_are_defined_never_nan():
    q, k = _qkv(1, 1, 40, 10)
    got = attention_stats(q.float(), k.float(), causal=True, block=BLOCK)   # rows 0..29 empty
    assert torch.isneginf(got.lse[..., :30]).all() and torch.isfinite(got.lse[..., 30:]).all()
    for name in ("entropy", "max_weight", "sink_mass", "prev_mass", "local_mass", "distance"):
        t = getattr(got, name)
        assert torch.isfinite(t).all() and (t[..., :30] == 0).all(), name
    assert (got.argmax[..., :30] == -1).all() and (got.argmax[..., 30:] >= 0).all()
    gold, _ = _gold(q, k, causal=True)
    torch.testing.assert_close(got.received.double(), gold.weights.sum(-2), atol=1e-5,
                               rtol=1e-5)


def test_bad_options_are_refused_by_name():
    q, k = _qkv(1, 1, 4, 4)
    with pytest.raises(ValueError, match="sink_keys"):
        attention_stats(q, k, sink_keys=-1)
    with pytest.raises(ValueError, match="band"):
        attention_stats(q, k, band=1.5)


def test_match_mass_is_prefix_matching_on_the_token_ids():
    # a repeated random sequence: the induction pattern's keys are known
    q, k = _qkv(1, 2, 90, 90, seed=4)
    ids = torch.randint(0, 7, (90,), generator=torch.Generator().manual_seed(1))
    gold, _ = _gold(q, k, causal=True)
    want = reference_stats(gold.weights, ids=ids)
    got = attention_stats(q.float(), k.float(), causal=True, ids=ids, block=BLOCK)
    torch.testing.assert_close(got.match_mass.double(), want.match_mass, atol=1e-5, rtol=1e-5)
    assert float(want.match_mass.max()) > 0.05                  # not a vacuous comparison
    with pytest.raises(ValueError, match="one token id per position"):
        attention_stats(q.float(), k.float(), ids=ids[:5])


def _pool(w, g):
    """Dense pooling, the specification: cells of ceil(N / g), the last one short."""
    n_q, n_k = w.shape[-2:]
    cq, ck = -(-n_q // g), -(-n_k // g)
    gq, gk = -(-n_q // cq), -(-n_k // ck)
    mean = torch.zeros(*w.shape[:-2], gq, gk, dtype=w.dtype)
    top = torch.zeros_like(mean)
    for a in range(gq):
        for b in range(gk):
            cell = w[..., a * cq:(a + 1) * cq, b * ck:(b + 1) * ck]
            mean[..., a, b] = cell.mean((-2, -1))
            top[..., a, b] = cell.amax((-2, -1))
    return mean, top


@pytest.mark.parametrize("shape,g", [((1, 2, 129, 129), 16), ((2, 2, 70, 33), 8),
                                     ((1, 2, 128, 256), 16),      # cells align with the tiles
                                     ((1, 2, 45, 100), 256), ((1, 1, 1, 1), 4)], ids=str)
@pytest.mark.parametrize("case", ["causal", "window (20, 5)", "key padding, one sequence empty"])
def test_pooled_maps_and_exact_rows_equal_the_dense_weights(shape, g, case):
    q, k = _qkv(*shape, seed=6)
    kw = CASES[case](shape)
    gold, _ = _gold(q, k, **kw)
    rows = [shape[2] - 1, 0, shape[2] // 2]
    got = attention_stats(q.float(), k.float(), pooled=g, rows=rows, block=BLOCK, **kw)
    mean, top = _pool(gold.weights, g)
    torch.testing.assert_close(got.pooled_mean.double(), mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.pooled_max.double(), top, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.row_weights.double(), gold.weights[..., rows, :],
                               atol=1e-6, rtol=1e-5)
    assert got.pooled_mean.shape[-2] <= g and got.pooled_mean.shape[-1] <= g


def test_pooled_and_rows_are_checked():
    q, k = _qkv(1, 1, 10, 10)
    with pytest.raises(ValueError, match="pooled must be an int >= 1"):
        attention_stats(q, k, pooled=0)
    with pytest.raises(ValueError, match=r"rows must be query indices in \[0, 10\)"):
        attention_stats(q, k, rows=[3, 10])


@pytest.mark.parametrize("slow", [False, True])
def test_rows_picked_by_a_function_of_the_largest_weights(slow):
    """rows= as a function: called once with the rows' largest weights (BH, N_q), on the
    fast path (a pass of maxima first) and the general one; its rows come back exact."""
    q, k = _qkv(1, 2, 100, 100, seed=7)
    q[..., 80, :] *= 20                                  # row 80: the largest top weight
    seen = []

    def pick(top):
        seen.append(top.shape)
        return [3, int(top.mean(0).argmax())]

    got = attention_stats(q.float(), k.float(), causal=True, rows=pick, block=BLOCK, slow=slow)
    gold, _ = _gold(q, k, causal=True)
    assert seen == [(2, 100)] and got.row_index.tolist()[0] == 3
    torch.testing.assert_close(got.row_weights.double(), gold.weights[..., got.row_index, :],
                               atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="rows must be query indices"):
        attention_stats(q.float(), k.float(), causal=True, rows=lambda top: [100])


# the first pass is the tiled forward itself (engine.eager.stats.forward_applies): causal-like
FAST = {
    "causal": {"causal": True},
    "causal + window 30": {"causal": True, "window": 30},
    "causal + key padding": {"causal": True,
                             "mask": masks.key_padding(torch.tensor([60, 0]))},
    "window (25, 0), temperature 0.5": {"window": (25, 0), "temperature": 0.5},
}


@pytest.mark.parametrize("shape", [(2, 2, 129, 129), (2, 4, 200, 200), (2, 2, 70, 33),
                                   (2, 2, 1, 1)], ids=str)
@pytest.mark.parametrize("case", list(FAST))
def test_the_forward_pass_statistics_equal_the_online_pass_and_the_weights(shape, case):
    b, h, n_q, n_k = shape
    q, k = _qkv(b, h, n_q, n_k, h_kv=2, seed=8)
    kw = FAST[case]
    ids = torch.randint(0, 5, (n_k,), generator=torch.Generator().manual_seed(2)) \
        if n_q == n_k else None
    gold, _ = _gold(q, k, enable_gqa=h != 2, **kw)
    want = reference_stats(gold.weights, lse=gold.lse, sink_keys=2, band=5, ids=ids)
    args = dict(sink_keys=2, band=5, ids=ids, enable_gqa=h != 2, block=BLOCK, rows=[n_q - 1],
                pooled=16, **kw)
    fast = attention_stats(q.float(), k.float(), **args)
    slow = attention_stats(q.float(), k.float(), slow=True, **args)
    for name in (*FIELDS, "match_mass", "row_weights", "pooled_max"):
        a, c = getattr(fast, name), getattr(slow, name)
        if a is None:
            assert c is None and (name != "match_mass" or ids is None), name
            continue
        if name == "argmax":
            assert torch.equal(a < 0, c < 0), name
            continue
        if name == "tied":
            assert torch.equal(a, c) and torch.equal(a, want.tied), name
            continue
        both_inf = torch.isinf(a.double()) & torch.isinf(c.double())
        assert float(torch.where(both_inf, 0.0, (a.double() - c.double()).abs()).max()) \
            <= 1e-5 * max(float(c.abs().nan_to_num(0, 0, 0).max()), 1), name
        b_ = getattr(want, name, None)
        if name in FIELDS and name not in ("lse", "argmax"):
            assert float((a.double() - b_).abs().max()) <= 1e-5 * max(float(b_.abs().max()),
                                                                      1), name


def test_ties_for_the_largest_weight_are_seen_across_tiles():
    """A row whose largest weight is shared by two keys, in one tile or in two, is ``tied``;
    the argmax is then the first of them."""
    n, d = 40, 4
    q = torch.zeros(1, 1, n, d)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, n, d)
    k[0, 0, 3, 0] = k[0, 0, 37, 0] = 5.0               # rows see both: one tie across tiles
    k[0, 0, 20, 0] = 4.0
    for slow in (False, True):
        st = attention_stats(q, k, block=(8, 16), slow=slow)
        assert bool(st.tied.all()) and bool((st.argmax == 3).all()), slow
        one = attention_stats(q, k, causal=True, block=(8, 16), slow=slow)
        assert bool(one.tied[0, 0, 37:].all()) and not bool(one.tied[0, 0, 3:37].any()), slow
    w = torch.softmax((q @ k.transpose(-1, -2)).double(), -1)
    assert bool(reference_stats(w).tied.all())
