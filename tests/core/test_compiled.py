"""The compiled tile modifier (attnlab.core.engine.modifiers.fused) against the eager path it
replaces and the float64 reference: outputs, lse, gradients (also of a captured learnable table)
and the census statistics, for every mask kind, at lengths that cross tiles, N_q > N_k and N_q <
N_k; and what happens where it cannot compile."""

import warnings

import pytest
import torch

from attnlab import attention, masks
from attnlab.core.engine.modifiers import fused
from attnlab.core.stats import attention_stats

B, H = 2, 3
# one worker pays inductor's start-up and compiles (about 15 s cold), not both
pytestmark = pytest.mark.xdist_group("inductor")

SLOPES = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)   # float64, as alibi_slopes
TABLE = torch.randn(H, 257, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx).abs()


def table_bias(score, b, h, q_idx, kv_idx):
    return score + TABLE[h, kv_idx - q_idx + 128]


KW = {"none": {}, "causal": {"causal": True}, "window": {"window": (6, 3)},
      "bool mask": {"mask": masks.dilated(2, 12, 12, offset=16)},
      "float mask": {"mask": "float"}}


@pytest.fixture(autouse=True)
def small_tiles(tiles):
    tiles(tiled_sizes=(16, 32))


def _qkv(n_q, n_k, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, n, d, generator=g, dtype=torch.float64).to(dtype)
            for n, d in ((n_q, 16), (n_k, 16), (n_k, 9))]


def _run(setting, monkeypatch, backend, q, k, v, **kw):
    monkeypatch.setenv("ATTNLAB_COMPILE", setting)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    res = attention(q, k, v, backend=backend, return_lse=True, **kw)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(res.out.shape, generator=g, dtype=torch.float64).to(res.out.dtype)
    grads = torch.autograd.grad((res.out * w).sum(), (q, k, v))
    return [res.out.detach(), res.lse.detach(), *grads]


@pytest.mark.parametrize("n_q, n_k", [(37, 53), (53, 37)])
@pytest.mark.parametrize("mask", list(KW))
@pytest.mark.parametrize("modifier", ["alibi", "softcap", "both"])
def test_compiled_equals_eager_and_reference(monkeypatch, modifier, mask, n_q, n_k):
    q, k, v = _qkv(n_q, n_k)
    kw = dict(KW[mask])
    if kw.get("mask") == "float":
        kw["mask"] = torch.randn(n_q, n_k, generator=torch.Generator().manual_seed(4),
                                 dtype=torch.float64)
    if modifier in ("alibi", "both"):
        kw["score_mod"] = alibi
    if modifier in ("softcap", "both"):
        kw["softcap"] = 2.0
    before = len(fused.report())
    fast = _run("1", monkeypatch, "tiled", q, k, v, **kw)
    eager = _run("0", monkeypatch, "tiled", q, k, v, **kw)
    ref = _run("0", monkeypatch, "reference", q, k, v, **kw)
    for a, b, c in zip(fast, eager, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(a, c, rtol=1e-9, atol=1e-9)
    assert len(fused.report()) >= before          # compiled here, or earlier in the process
    assert any(r["modifier"] in ("alibi", "softcap") for r in fused.report())


def test_float32_within_the_same_precision_reference(monkeypatch):
    q, k, v = _qkv(70, 70, torch.float32)
    fast = _run("1", monkeypatch, "tiled", q, k, v, score_mod=alibi, causal=True)
    ref32 = _run("0", monkeypatch, "reference", q, k, v, score_mod=alibi, causal=True)
    ref64 = _run("0", monkeypatch, "reference", *(t.double() for t in (q, k, v)),
                 score_mod=alibi, causal=True)
    for a, b, c in zip(fast, ref32, ref64):
        err, err_ref = (a.double() - c).abs().max(), (b.double() - c).abs().max()
        assert err <= 4 * err_ref + 1e-6


def test_gradient_of_a_captured_table_still_flows(monkeypatch):
    """The forward runs compiled, the backward recomputes the modifier under autograd."""
    table = TABLE.clone().requires_grad_()

    def learned(score, b, h, q_idx, kv_idx):
        return score + table[h, kv_idx - q_idx + 128]

    q, k, v = _qkv(45, 45)
    out = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("ATTNLAB_COMPILE", setting)
        res = attention(q, k, v, score_mod=learned, causal=True, backend="tiled")
        out[setting] = (res.detach(), torch.autograd.grad(res.square().sum(), table)[0])
    res = attention(q, k, v, score_mod=learned, causal=True, backend="reference")
    grad_ref = torch.autograd.grad(res.square().sum(), table)[0]
    torch.testing.assert_close(out["1"][0], out["0"][0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out["1"][1], grad_ref, rtol=1e-9, atol=1e-9)


def test_statistics_the_same_compiled(monkeypatch):
    q, k, _ = _qkv(61, 61)
    found = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("ATTNLAB_COMPILE", setting)
        found[setting] = attention_stats(q, k, causal=True, score_mod=table_bias, columns=True)
    for name in ("entropy", "sink_mass", "max_weight", "received"):
        a, b = getattr(found["1"], name), getattr(found["0"], name)
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


def test_small_calls_stay_eager_by_default(monkeypatch):
    monkeypatch.delenv("ATTNLAB_COMPILE", raising=False)
    assert not fused.wanted(fused.MIN_ENTRIES - 1, torch.device("cpu"))
    assert fused.wanted(fused.MIN_ENTRIES, torch.device("cpu")) == (
        fused.compiler() is not None)


def test_no_compiler_warns_once_and_runs_eager(monkeypatch):
    monkeypatch.setenv("ATTNLAB_COMPILE", "1")
    monkeypatch.setattr(fused, "compiler", lambda: None)
    monkeypatch.setattr(fused, "_warned", False)
    q, k, v = _qkv(20, 20)
    with pytest.warns(fused.CompileWarning, match="no C\\+\\+ compiler") as seen:
        a = attention(q, k, v, score_mod=alibi, backend="tiled")
        b = attention(q, k, v, score_mod=alibi, backend="tiled")
    assert len([w for w in seen if issubclass(w.category, fused.CompileWarning)]) == 1
    torch.testing.assert_close(a, b)


def test_a_failed_compile_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setenv("ATTNLAB_COMPILE", "1")
    monkeypatch.setattr(fused, "_warned", False)

    def broken_compile(fn, **kw):
        def run(*a):
            raise RuntimeError("planted: the C++ build failed")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)

    def half(score, b, h, q_idx, kv_idx):
        return score * 0.5

    q, k, v = _qkv(20, 20)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = attention(q, k, v, score_mod=half, backend="tiled")
        again = attention(q, k, v, score_mod=half, backend="tiled")
    ref = attention(q, k, v, score_mod=half, backend="reference")
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(again, ref)
    found = [w for w in seen if issubclass(w.category, fused.CompileWarning)]
    assert len(found) == 1 and "planted" in str(found[0].message)


def test_a_mistake_in_the_modifier_gets_the_eager_error(monkeypatch):
    monkeypatch.setenv("ATTNLAB_COMPILE", "1")
    q, k, v = _qkv(20, 20)

    def wrong(score, b, h, q_idx, kv_idx):
        return score[..., :3]

    with pytest.raises(ValueError, match="score_mod must return scores of the tile's shape"):
        attention(q, k, v, score_mod=wrong, backend="tiled")


def test_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv("ATTNLAB_COMPILE", "yes")
    with pytest.raises(ValueError, match="ATTNLAB_COMPILE must be 0, 1 or auto, got 'yes'"):
        fused.wanted(10**9, torch.device("cpu"))
