"""Score modifiers and mask functions of ``q_idx - kv_idx`` on the compiled tile loop
(attnlab.core.engine.modifiers.diagonal, attnlab.core.engine.compiled.loop): which functions are
recognized from their graph, and, for each kind (ALiBi with learnable slopes, a per-(batch, head)
table, comparisons, a softcap before the modifier, windows, causal and dilated masks, per-head
masks, masks that leave rows empty), the compiled loop against the eager tile loop and the float64
reference on out, lse, dq, dk, dv and the gradients of the tensors the modifier captures, at
lengths that cross tiles with N_q <, = and > N_k."""

import pytest
import torch

from attnlab import attention
from attnlab.core.engine.compiled import loop
from attnlab.core.engine.modifiers import diagonal
from tests.helpers import assert_close_by_name

SLOPES = torch.tensor([0.5, 0.25, 0.125, 0.0625])
TABLE = torch.linspace(-1.0, 1.0, 8).view(2, 4)


def _alibi(slopes):
    return lambda s, b, h, qi, ki: s - slopes[h] * (qi - ki).abs()


def _table(table):
    return lambda s, b, h, qi, ki: s + table[b, h] * ((qi - ki) > 3).to(s.dtype)


def _kinds(slopes, table):
    """name -> attention() keywords; slopes and table are the captured tensors."""
    return {
        "alibi": {"score_mod": _alibi(slopes)},
        "alibi causal": {"score_mod": _alibi(slopes), "causal": True},
        "table of (b, h)": {"score_mod": _table(table)},
        "softcap then alibi": {"score_mod": _alibi(slopes), "softcap": 3.0},
        "window mask": {"mask": lambda b, h, qi, ki: (qi - ki).abs() <= 5},
        "causal mask": {"mask": lambda b, h, qi, ki: kv_le(qi, ki)},
        "dilated mask": {"mask": lambda b, h, qi, ki: ((qi - ki) % 3) == 0},
        "per-head mask": {"mask": lambda b, h, qi, ki: (qi - ki) <= h * 7 - 4},
        "far keys only": {"mask": lambda b, h, qi, ki: (qi - ki) >= 30},
        "alibi, mask and window": {"score_mod": _alibi(slopes), "window": (9, 2),
                                   "mask": lambda b, h, qi, ki: (qi - ki) != 1},
        "window mask and causal": {"mask": lambda b, h, qi, ki: (qi - ki).abs() <= 5,
                                   "causal": True},          # two bands: their intersection
        "mask narrowing a window": {"mask": lambda b, h, qi, ki: (qi - ki) >= -3,
                                    "window": (4, 6)},
    }


def kv_le(qi, ki):
    return ki <= qi


KINDS = list(_kinds(SLOPES, TABLE))


@pytest.fixture(scope="module")
def built():
    if not loop.available(build_if_missing=True):
        pytest.fail(f"the compiled loop did not build: {loop.report()['failed']}")


def _run(setting, monkeypatch, kind, n_q, n_k, dtype=torch.float32, backend="tiled",
         h_q=4, h_kv=4):
    monkeypatch.setenv("ATTNLAB_LOOP", setting)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, n, d, generator=g, dtype=torch.float64).to(dtype)
               .requires_grad_() for h, n, d in ((h_q, n_q, 16), (h_kv, n_k, 16), (h_kv, n_k, 9)))
    slopes, table = SLOPES.clone().requires_grad_(), TABLE.clone().requires_grad_()
    res = attention(q, k, v, backend=backend, return_lse=True, enable_gqa=h_q != h_kv,
                    **_kinds(slopes, table)[kind])
    w = torch.randn(res.out.shape, generator=g, dtype=torch.float64).to(res.out.dtype)
    lse = torch.where(torch.isinf(res.lse), 0.0, res.lse)
    grads = torch.autograd.grad((res.out * w).sum() + (lse * 0.3).sum(),
                                (q, k, v, slopes, table), allow_unused=True)
    return [torch.zeros(1) if t is None else t.detach().double()
            for t in (res.out, res.lse, *grads)]


def _close(got, want, tol):
    assert_close_by_name(("out", "lse", "dq", "dk", "dv", "d slopes", "d table"), got, want, tol)


@pytest.mark.parametrize("n_q, n_k", [(37, 53), (53, 37), (64, 64), (1, 40)])
@pytest.mark.parametrize("kind", KINDS)
def test_modifiers_compiled_equal_eager_and_reference(built, tiles, monkeypatch, kind, n_q,
                                                      n_k):
    tiles(tiled_sizes=(16, 32))                       # every length crosses tile borders
    calls = []
    real = loop.forward
    monkeypatch.setattr(loop, "forward", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    compiled = _run("1", monkeypatch, kind, n_q, n_k)
    assert calls == [1], "the compiled loop did not run"
    eager = _run("0", monkeypatch, kind, n_q, n_k)
    ref = _run("0", monkeypatch, kind, n_q, n_k, dtype=torch.float64, backend="reference")
    _close(compiled, eager, 2e-5)
    _close(compiled, ref, 5e-5)


@pytest.mark.parametrize("kind", ["alibi causal", "per-head mask", "window mask"])
def test_grouped_query_heads_with_modifiers(built, monkeypatch, kind):
    compiled = _run("1", monkeypatch, kind, 300, 300, h_q=4, h_kv=2)
    ref = _run("0", monkeypatch, kind, 300, 300, dtype=torch.float64, backend="reference",
               h_q=4, h_kv=2)
    _close(compiled, ref, 5e-5)


def test_a_mask_of_one_run_of_diagonals_is_a_band(built, monkeypatch):
    from attnlab.core.spec import build_spec

    q = torch.randn(1, 2, 40, 8)
    for mask, band in (((lambda b, h, qi, ki: (qi - ki).abs() <= 5), (0, 5, 5)),
                       ((lambda b, h, qi, ki: kv_le(qi, ki)), (0, 39, 0))):
        spec = build_spec(q, q, q, mask=mask)
        bias, got = loop.modifiers(spec, 2)
        assert bias is None and got == band
    dilated = build_spec(q, q, q, mask=lambda b, h, qi, ki: ((qi - ki) % 3) == 0)
    bias, _ = loop.modifiers(dilated, 2)
    assert bias.shape == (2, 79) and torch.isneginf(bias[:, 1::3]).all()
    assert (bias[:, ::3] == 0).all()


SCORE_MODS = {
    "alibi": (_alibi(SLOPES), True),
    "table": (_table(TABLE), True),
    "comparison": (lambda s, b, h, qi, ki: s + torch.where(ki > qi, -5.0, 0.0), True),
    "reversed difference": (lambda s, b, h, qi, ki: s - 0.1 * (ki - qi).float(), True),
    "scaled score": (lambda s, b, h, qi, ki: s * 0.5, False),
    "query position": (lambda s, b, h, qi, ki: s + 0.01 * qi, False),
    "product of positions": (lambda s, b, h, qi, ki: s + 0.001 * qi * ki, False),
    "score in half precision": (lambda s, b, h, qi, ki: s.half() - 0.1 * (qi - ki), False),
    "positions in half precision": (lambda s, b, h, qi, ki: s - (qi.half() - ki.half()), False),
    "score twice": (lambda s, b, h, qi, ki: s + s.tanh(), False),
    "branch on values": (lambda s, b, h, qi, ki: s + 1 if bool((h > 0).any()) else s, False),
}
MASKS = {
    "window": (lambda b, h, qi, ki: (qi - ki).abs() <= 4, True),
    "per head": (lambda b, h, qi, ki: (qi - ki) < h + 2, True),
    "document": (lambda b, h, qi, ki: (qi // 8) == (ki // 8), False),
    "prefix": (lambda b, h, qi, ki: (ki < 4) | (ki <= qi), False),
}


@pytest.mark.parametrize("name", list(SCORE_MODS))
def test_which_score_mods_are_diagonal(name):
    fn, expected = SCORE_MODS[name]
    assert diagonal.score_mod_is_diagonal(fn) is expected


@pytest.mark.parametrize("name", list(MASKS))
def test_which_masks_are_diagonal(name):
    fn, expected = MASKS[name]
    assert diagonal.mask_fn_is_diagonal(fn) is expected


@pytest.mark.parametrize("name", ["query position", "document"])
def test_other_modifiers_run_the_eager_loop(built, monkeypatch, name):
    monkeypatch.setenv("ATTNLAB_LOOP", "1")
    calls = []
    real = loop.forward
    monkeypatch.setattr(loop, "forward", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q = torch.randn(1, 2, 20, 8)
    kw = {"score_mod": SCORE_MODS[name][0]} if name in SCORE_MODS else {"mask": MASKS[name][0]}
    got = attention(q, q, q, backend="tiled", **kw)
    want = attention(q.double(), q.double(), q.double(), backend="reference", **kw)
    assert calls == [] and torch.allclose(got.double(), want, atol=1e-5)
