"""The compiled tile loop (attnlab.core.engine.compiled.loop) against the eager tile loop it
replaces and the float64 reference: outputs, lse and gradients (through the output and through
lse), for every band kind it takes, at lengths that cross tiles, N_q > N_k (rows that keep no key)
and N_q < N_k, grouped-query heads, a softcap and half-precision inputs; which calls it leaves to
the eager loop; and what happens where it cannot be built."""

import warnings

import pytest
import torch

from attnlab import attention
from attnlab.core.backends import tiled
from attnlab.core.engine.compiled import loop
from tests.helpers import assert_close_by_name

KINDS = {"none": {}, "causal": {"causal": True}, "window": {"window": (6, 3)},
         "left window": {"window": (5, 0)}, "diagonal": {"window": (0, 0)},
         "causal softcap": {"causal": True, "softcap": 4.0}, "softcap": {"softcap": 30.0}}


@pytest.fixture(scope="module")
def built():
    if not loop.available(build_if_missing=True):
        pytest.fail(f"the compiled loop did not build: {loop.report()['failed']}")


def _qkv(n_q, n_k, h_q=4, h_kv=4, d_v=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, h, n, d, generator=g, dtype=torch.float64)
            for h, n, d in ((h_q, n_q, 16), (h_kv, n_k, 16), (h_kv, n_k, d_v))]


def _run(setting, monkeypatch, q, k, v, dtype=torch.float32, backend="tiled", **kw):
    monkeypatch.setenv("ATTNLAB_LOOP", setting)
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    res = attention(q, k, v, backend=backend, return_lse=True,
                    enable_gqa=q.shape[1] != k.shape[1], **kw)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(res.out.shape, generator=g, dtype=torch.float64).to(res.out.dtype)
    lse = torch.where(torch.isinf(res.lse), 0.0, res.lse)
    grads = torch.autograd.grad((res.out * w).sum() + (lse * 0.3).sum(), (q, k, v))
    return [t.detach().double() for t in (res.out, res.lse, *grads)]


def _close(got, want, tol):
    assert_close_by_name(("out", "lse", "dq", "dk", "dv"), got, want, tol)


@pytest.mark.parametrize("n_q, n_k", [(37, 53), (53, 37), (64, 64), (1, 40)])
@pytest.mark.parametrize("kind", list(KINDS))
def test_compiled_equals_eager_and_reference(built, tiles, monkeypatch, kind, n_q, n_k):
    tiles(tiled_sizes=(16, 32))                       # every length crosses tile borders
    q, k, v = _qkv(n_q, n_k)
    compiled = _run("1", monkeypatch, q, k, v, **KINDS[kind])
    eager = _run("0", monkeypatch, q, k, v, **KINDS[kind])
    ref = _run("0", monkeypatch, q, k, v, dtype=torch.float64, backend="reference",
               **KINDS[kind])
    _close(compiled, eager, 2e-5)
    _close(compiled, ref, 2e-5)


@pytest.mark.parametrize("kind", ["none", "causal", "window"])
def test_grouped_query_heads_and_default_tiles(built, monkeypatch, kind):
    q, k, v = _qkv(300, 300, h_q=6, h_kv=2, d_v=16)      # 6 query heads on 2 K/V heads
    compiled = _run("1", monkeypatch, q, k, v, **KINDS[kind])
    ref = _run("0", monkeypatch, q, k, v, dtype=torch.float64, backend="reference",
               **KINDS[kind])
    _close(compiled, ref, 2e-5)


def test_rows_that_keep_no_key_give_zero_and_finite_gradients(built, monkeypatch):
    q, k, v = _qkv(40, 10)
    out, lse, dq, dk, dv = _run("1", monkeypatch, q, k, v, causal=True)
    # bottom-right alignment: the first 30 query rows see no key
    assert torch.isneginf(lse[..., :30]).all() and not torch.isinf(lse[..., 30:]).any()
    assert (out[..., :30, :] == 0).all() and (dq[..., :30, :] == 0).all()
    assert all(torch.isfinite(t).all() for t in (out, dq, dk, dv))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_are_computed_in_float32(built, monkeypatch, dtype):
    q, k, v = _qkv(45, 45)
    compiled = _run("1", monkeypatch, q, k, v, dtype=dtype, causal=True)
    eager = _run("0", monkeypatch, q, k, v, dtype=dtype, causal=True)
    _close(compiled, eager, 2e-2)


def test_large_scores_take_the_shifted_path(built, monkeypatch):
    # |q| |k| far above 64 in log2 units: the row maximum is taken, nothing overflows
    q, k, v = _qkv(50, 70)
    q = q * 30.0
    _close(_run("1", monkeypatch, q, k, v), _run("0", monkeypatch, q, k, v, dtype=torch.float64,
                                                  backend="reference"), 1e-4)


def test_the_loop_runs_where_it_should(built, monkeypatch):
    calls = []
    real = loop.forward
    monkeypatch.setattr(loop, "forward", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v = _qkv(20, 20)
    _run("1", monkeypatch, q, k, v, causal=True)
    assert calls == [1]
    # the eager loop takes what the compiled one does not
    _run("1", monkeypatch, q, k, v, dtype=torch.float64)
    _run("1", monkeypatch, q, k, v, mask=torch.ones(20, 20, dtype=torch.bool).tril())
    _run("1", monkeypatch, q, k, v, score_mod=lambda s, b, h, i, j: s * 0.5)
    _run("0", monkeypatch, q, k, v, causal=True)
    assert calls == [1]


def test_setting_is_checked(monkeypatch):
    monkeypatch.setenv("ATTNLAB_LOOP", "yes")
    with pytest.raises(ValueError, match="ATTNLAB_LOOP must be 0, 1 or auto, got 'yes'"):
        loop.setting()


def _fresh_state(monkeypatch, tmp_path):
    monkeypatch.setattr(loop, "_state", {"loaded": False, "failed": None, "warned": False,
                                         "timings": {}})
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))


def test_no_compiler_falls_back_with_one_warning(monkeypatch, tmp_path):
    _fresh_state(monkeypatch, tmp_path)
    monkeypatch.setattr(loop, "compiler", lambda: None)
    monkeypatch.setenv("ATTNLAB_LOOP", "auto")
    with pytest.warns(loop.LoopWarning, match="no C\\+\\+ compiler found"):
        assert not loop.available()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not loop.available()                    # said once
    q, k, v = _qkv(20, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = attention(*(t.float() for t in (q, k, v)), backend="tiled")
    assert torch.allclose(out.double(), attention(q, k, v, backend="reference"), atol=1e-5)
    monkeypatch.setattr(loop, "_state", {"loaded": False, "failed": None, "warned": False,
                                         "timings": {}})
    monkeypatch.setenv("ATTNLAB_LOOP", "1")           # asked for: an error, not a warning
    with pytest.raises(loop.LoopUnavailable, match="install g\\+\\+"):
        loop.available()


def test_a_failed_build_says_what_the_compiler_said(monkeypatch, tmp_path):
    _fresh_state(monkeypatch, tmp_path)
    bad = tmp_path / "loop.cpp"
    bad.write_text("int broken = ;\n")
    monkeypatch.setattr(loop, "_SOURCE", bad)
    with pytest.raises(loop.LoopUnavailable, match="failed to build loop.cpp: .*error"):
        loop.build()
    assert not list(tmp_path.glob("loop/*.so")) and not list(tmp_path.glob("loop/*.tmp*"))


def test_built_library_is_found_by_a_new_process(built):
    import subprocess
    import sys

    code = ("from attnlab.core.engine.compiled import loop; "
            "assert loop.available(build_if_missing=False); "
            "print(loop.report()['path'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(loop.library_path())


def test_tiled_module_exposes_the_loop_choice():
    assert tiled.loop is loop


# key tiles a multiple of the vector width, and (13 x 20, with named rows) not
@pytest.mark.parametrize("sizes, extras", [((16, 32), "none"), ((16, 32), "named rows"),
                                           ((16, 32), "picked rows"), ((13, 20), "named rows")])
@pytest.mark.parametrize("kind", [{"causal": True}, {"window": (7, 0)}])
@pytest.mark.parametrize("n_q, n_k", [(45, 45), (30, 50), (50, 30)])
def test_statistics_on_the_compiled_loop(built, tiles, monkeypatch, kind, n_q, n_k, extras,
                                         sizes):
    """The census on the compiled loop gives the eager loop's statistics and the float64
    reference's: the row statistics in the forward's own pass, and (with columns, pooled maps,
    exact rows named, one asked twice, or picked by their largest weights from the forward's
    maxima, and rows that count) a second pass for those."""
    import dataclasses

    from attnlab.core.engine.compiled import stats as compiled_stats
    from attnlab.core.engine.eager import stats as eager_stats
    from attnlab.core.stats import attention_stats

    more = extras != "none"
    pooled = 4 if more else None
    rows = {"none": None, "named rows": torch.tensor([0, n_q - 1, 3, 3]),
            "picked rows": lambda top: top.amax(0).topk(3).indices}[extras]
    queries = (torch.arange(n_q) % 3 != 1) if more else None
    second, passes = [], []
    real_second = compiled_stats.rows_pass
    monkeypatch.setattr(compiled_stats, "rows_pass",
                        lambda *a, **kw: second.append(1) or real_second(*a, **kw))
    real_rows = eager_stats.second_pass
    monkeypatch.setattr(eager_stats, "second_pass",
                        lambda *a, **kw: passes.append(1) or real_rows(*a, **kw))

    tiles(tiled_sizes=sizes)
    q, k, v = _qkv(n_q, n_k, h_q=4, h_kv=2)
    ids = torch.randint(0, 5, (n_k,), generator=torch.Generator().manual_seed(2))
    ids = ids if n_q == n_k else None

    def stats(setting, dtype):
        monkeypatch.setenv("ATTNLAB_LOOP", setting)
        got = attention_stats(q.to(dtype), k.to(dtype), v.to(dtype), enable_gqa=True, ids=ids,
                              columns=more, pooled=pooled, rows=rows, queries=queries,
                              **kind)
        return {f.name: getattr(got, f.name) for f in dataclasses.fields(got)
                if isinstance(getattr(got, f.name), torch.Tensor)}

    calls = []
    real_first = compiled_stats.first_pass
    monkeypatch.setattr(compiled_stats, "first_pass",
                        lambda *a: calls.append((a[5] is not None, a[6] is not None))
                        or real_first(*a))
    compiled = stats("1", torch.float32)
    # the row statistics, columns, pooled maps and named rows come out of the compiled
    # forward; rows picked from its maxima take a second (compiled) pass; no eager pass runs
    assert calls == [(True, more)] and not passes
    assert len(second) == int(extras == "picked rows")
    eager, ref = stats("0", torch.float32), stats("0", torch.float64)
    untied = ~eager["tied"]
    assert torch.equal(compiled["argmax"][untied], eager["argmax"][untied])
    for name, value in compiled.items():
        for other in (eager, ref):
            want = other[name]
            if value.dtype in (torch.bool, torch.int64):
                if name not in ("argmax", "tied"):       # ties may differ by float32 rounding
                    assert torch.equal(value, want), name
                continue
            a, b = value.double(), want.double()
            assert torch.equal(torch.isneginf(a), torch.isneginf(b)), name
            a, b = torch.nan_to_num(a, neginf=0.0), torch.nan_to_num(b, neginf=0.0)
            assert (a - b).abs().max() <= 1e-4 * b.abs().max().clamp_min(1.0), name


def test_token_ids_beyond_int32_keep_their_matches(built, monkeypatch):
    """The loop compares token ids as int32: larger ids are renumbered, not wrapped (2^32
    would otherwise equal token 0)."""
    from attnlab.core.stats import attention_stats

    monkeypatch.setenv("ATTNLAB_LOOP", "1")
    q, k, _ = _qkv(40, 40)
    ids = torch.randint(0, 4, (40,), generator=torch.Generator().manual_seed(3))
    big = torch.where(ids == 1, 2 ** 32, ids)          # token 1 renamed 2^32: not token 0
    small, large = (attention_stats(q.float(), k.float(), causal=True, ids=i)
                    for i in (ids, big))
    assert torch.equal(small.match_mass, large.match_mass)
    assert torch.equal(small.dup_mass, large.dup_mass)
