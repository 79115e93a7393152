"""attnlab.testing.check_attention finds planted bugs and passes attnlab's exact backends."""


import math
import re

import pytest
import torch

from attnlab import attention
from attnlab.testing import CheckReport, check_attention, check_backend
from attnlab.testing import bugs as B
from attnlab.testing.bugs import BUGS, CORRECT


def _ref(q, k, v, **o):
    return attention(q, k, v, backend="reference", **o)


@pytest.mark.parametrize("name", list(BUGS))
def test_planted_bugs_are_found(name):
    """Every bug of attnlab.testing.bugs fails the case meant to catch it, with its words."""
    bug = BUGS[name]
    report = check_attention(bug.fn, supports=bug.supports, dtypes=bug.dtypes,
                             gradcheck=False)
    assert not report
    failed = [r for r in report.failures if r.case.startswith(bug.case)]
    assert failed, [r.case for r in report.failures]
    assert bug.words in failed[0].detail, failed[0].detail
    with pytest.raises(AssertionError, match=re.escape(failed[0].case)):
        report.raise_for_failures()


def test_a_failure_reports_the_smallest_failing_input():
    report = check_attention(B.top_left_causal, supports=("causal",), dtypes=(torch.float64,))
    bad = next(r for r in report.failures if r.case.startswith("causal (bottom-right)"))
    assert bad.smallest.startswith("B=1 H=1 N_q=2 N_k=3")         # the smallest N_q < N_k


def test_the_wrong_gradient_also_fails_gradcheck():
    report = check_attention(B.wrong_gradient, dtypes=(torch.float64,))
    assert "gradcheck (float64, N=3, D=4)" in {r.case for r in report.failures}


@pytest.mark.parametrize("backend", ["reference", "sdpa", "tiled", "blocksparse"])
def test_every_exact_backend_passes(backend):
    report = check_backend(backend)
    assert isinstance(report, CheckReport)
    report.raise_for_failures()
    assert sum(not r.skipped for r in report.results) >= 30
    assert "passed" in str(report)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown feature"):
        check_attention(_ref, supports=("causal", "flash"))
    with pytest.raises(TypeError, match="callable"):
        check_attention("attention")


def test_register_backend_with_check_runs_the_kit():
    from attnlab.core.registry import Capabilities, list_backends
    from attnlab.core.spec import AttentionOutput
    from attnlab.testing import register_checked

    def good(q, k, v, spec):
        return AttentionOutput(attention(q, k, v, backend="reference", scale=spec.scale))

    def bad(q, k, v, spec):                                   # ignores the scale
        return AttentionOutput(attention(q, k, v, backend="reference", scale=1.0))

    caps = Capabilities(exact=False, masks=frozenset())
    with pytest.raises(ValueError, match="failed .* conformance cases"):
        register_checked("planted", bad, caps)
    assert "planted" not in list_backends()
    register_checked("planted", good, caps)
    try:
        q = torch.randn(1, 1, 3, 4)
        torch.testing.assert_close(attention(q, q, q, backend="planted"),
                                   attention(q, q, q, backend="reference"))
    finally:
        from attnlab.core.registry import unregister_backend
        unregister_backend("planted")


def test_register_backend_refuses_check_true_and_names_register_checked():
    from attnlab.core.registry import Capabilities, list_backends, register_backend
    from attnlab.core.spec import AttentionOutput

    def bad(q, k, v, spec):                                   # ignores the scale
        return AttentionOutput(attention(q, k, v, backend="reference", scale=1.0))

    with pytest.raises(TypeError, match="register_checked"):
        register_backend("planted2", bad, Capabilities(exact=False, masks=frozenset()),
                         check=True)
    assert "planted2" not in list_backends()


def test_check_module_against_torch():
    from attnlab.nn import MultiheadAttention
    from attnlab.testing import check_module

    torch.manual_seed(0)
    good = MultiheadAttention(16, 4, batch_first=True)
    check_module(good).raise_for_failures()

    class NoScale(MultiheadAttention):              # a planted bug: the 1/sqrt(d) is lost
        def forward(self, query, key=None, value=None, **kw):
            return super().forward(query * 2.0, key, value, **kw)

    bad = NoScale(16, 4, batch_first=True)
    bad.load_state_dict(good.state_dict())
    report = check_module(bad)
    assert not report and len(report.failures) == len(report.results)


def test_check_on_the_command_line(capsys):
    from attnlab.cli import main

    assert main(["check", "attnlab.testing.bugs:top_left_causal", "--supports", "causal",
                 "--dtypes", "float32"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main(["check", "tiled", "--dtypes", "float32"]) == 0
    assert main(["check", "nowhere.module:fn"]) == 2
    assert main(["check", "tiled", "--supports", "flash"]) == 2


def test_the_worked_example_runs(capsys):
    import importlib.util
    from pathlib import Path

    from attnlab.core.registry import unregister_backend

    path = Path(__file__).resolve().parents[2] / "examples" / "sigmoid_attention.py"
    spec = importlib.util.spec_from_file_location("sigmoid_attention", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.main()
    finally:
        unregister_backend("sigmoid")
    assert "registered" in capsys.readouterr().out
    # A tiled version whose bias uses the tile's length instead of N_k is right only while
    # the keys fit in one tile: the kit's long case (N_k = 140) catches it.
    def per_tile_bias(q, k, v, causal=False, **o):
        out = 0
        for j in range(0, k.shape[-2], 64):
            kk, vv = k[..., j:j + 64, :], v[..., j:j + 64, :]
            part = mod.sigmoid_reference(q, kk, vv, causal=False, **o)
            out = out + part
        return out

    report = check_attention(per_tile_bias, reference=mod.sigmoid_reference,
                             dtypes=(torch.float32,))
    assert "plain, long" in {r.case for r in report.failures}
    assert "plain" not in {r.case for r in report.failures}
    assert not check_attention(mod.sigmoid_tiled, supports={"causal"},
                               dtypes=(torch.float32,))      # it is not softmax attention


def test_dropout_without_rescale_is_also_biased():
    report = check_attention(B.dropout_without_rescale, supports=("dropout",),
                             dtypes=(torch.float32,), gradcheck=False)
    unbiased = next(r for r in report.results if r.case.startswith("dropout is unbiased"))
    assert not unbiased.passed and "off by" in unbiased.detail


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_but_unusual_implementations_pass(name):
    fn, supports = CORRECT[name]
    check_attention(fn, supports=supports).raise_for_failures()


def _plain_float64(lse_of):
    """The plain way: scores and mask in float64, weights from the detached row max, cast."""
    def fn(q, k, v, mask=None, scale=None):
        dt = q.dtype
        q, k, v = q.double(), k.double(), v.double()
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q @ k.transpose(-2, -1)) * scale
        if mask is not None:
            s = (s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool
                 else s + mask.double())
        m = s.amax(-1, keepdim=True).detach()
        m = torch.where(torch.isneginf(m), 0.0, m)
        p = torch.exp(s - m)
        l = p.sum(-1, keepdim=True)
        empty = l == 0
        a = p / torch.where(empty, 1.0, l)
        return (a @ v).to(dt), lse_of(s, m, l, empty).to(dt)
    return fn


def test_rows_the_dtype_absorbs_follow_one_lse_gradient_rule():
    """d lse / d S = A on rows under a -1e38 mask: a plain float64 variant written with the
    detached max follows it and passes; one built on torch.logsumexp (whose backward gives 1 on
    every key of such a row) fails there, with the rule named; attnlab's backends follow it."""
    from attnlab.testing.cases import ABSORBED_RULE

    supports = {"float_mask", "mask", "lse", "scale"}
    by_max = _plain_float64(lambda s, m, l, empty: torch.where(
        empty, float("-inf"), m + torch.log(torch.where(empty, 1.0, l))).squeeze(-1))
    report = check_attention(by_max, supports=supports, dtypes=(torch.float64, torch.float32))
    assert report.passed, report.failures
    builtin = _plain_float64(lambda s, m, l, empty: torch.logsumexp(s, -1))
    report = check_attention(builtin, supports=supports, dtypes=(torch.float64,))
    assert not report.passed
    assert all("-1e38" in f.case for f in report.failures)
    assert ABSORBED_RULE in str(report.failures[0])
    for backend in ("reference", "tiled", "sdpa"):
        assert check_backend(backend, dtypes=(torch.float64,)).passed, backend
