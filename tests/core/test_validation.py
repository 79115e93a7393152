"""Bad input raises ValueError / TypeError naming the argument and the fix."""

import pytest
import torch

from attnlab import Capabilities, attention, list_backends, register_backend, unregister_backend

q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(q=torch.randn(2, 5, 6)), ValueError, ["q and k", "D_k"]),
    (dict(v=torch.randn(2, 6, 3)), ValueError, ["k and v", "N_k"]),
    (dict(k=torch.randn(3, 7, 8)), ValueError, ["leading dims", "broadcast"]),
    (dict(q=[[1.0]]), TypeError, ["q must be a torch.Tensor", "torch.as_tensor"]),
    (dict(q=torch.ones(2, 5, 8, dtype=torch.long)), TypeError, ["floating", "q.float()"]),
    (dict(v=torch.randn(2, 7, 3, dtype=torch.float64)), TypeError, ["share one dtype"]),
    (dict(q=torch.randn(8)), ValueError, ["at least 2 dims"]),
    (dict(mask=torch.ones(5, 6, dtype=torch.bool)), ValueError,
     ["mask of shape (5, 6)", "(N_q, N_k)"]),
    (dict(mask=torch.ones(3, 5, 7, dtype=torch.bool)), ValueError, ["does not broadcast"]),
    (dict(mask=torch.ones(5, 7, dtype=torch.int64)), TypeError,
     ["mask must be bool", "mask.bool()"]),
    (dict(mask="causal"), TypeError, ["mask must be", "attnlab.core.masks"]),
    (dict(scale=0.0), ValueError, ["scale must be", "> 0"]),
    (dict(scale=-1.0), ValueError, ["scale"]),
    (dict(scale=float("nan")), ValueError, ["scale"]),
    (dict(temperature=0), ValueError, ["temperature must be", "> 0"]),
    (dict(dropout_p=1.0), ValueError, ["dropout_p must be in [0, 1)"]),
    (dict(dropout_p=-0.1), ValueError, ["dropout_p"]),
    (dict(window=-1), ValueError, ["window must be", "(left, right)"]),
    (dict(window=(1, 2, 3)), ValueError, ["window"]),
    (dict(causal=1), TypeError, ["causal must be True or False"]),
    (dict(backend="flash3"), ValueError,
     ["backend must be one of", "reference", "tiled", "'flash3'"]),
    (dict(generator=0), TypeError, ["generator must be a torch.Generator"]),
])
def test_bad_input_names_argument_and_fix(kwargs, exc, words):
    args = dict(q=q, k=k, v=v)
    args.update(kwargs)
    qq, kk, vv = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc) as info:
        attention(qq, kk, vv, **args)
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


@pytest.mark.parametrize("backend, kwargs, words", [
    ("sdpa", dict(return_weights=True), ["'sdpa' cannot serve", "weights", "reference"]),
    ("sdpa", dict(return_lse=True), ["lse", "tiled"]),
    ("sdpa", dict(dropout_p=0.1), ["dropout"]),
    ("tiled", dict(return_weights=True), ["'tiled' cannot serve", "weights"]),
])
def test_named_backend_that_cannot_serve_is_an_error(backend, kwargs, words):
    with pytest.raises(ValueError) as info:
        attention(q, k, v, backend=backend, **kwargs)
    for w in words:
        assert w in str(info.value)


def test_register_backend_rejects_duplicates_and_auto():
    with pytest.raises(ValueError, match="already registered"):
        register_backend("reference", lambda *a: None, Capabilities())
    with pytest.raises(ValueError, match="other than 'auto'"):
        register_backend("auto", lambda *a: None, Capabilities())


def test_custom_backend_runs_when_named_and_approximations_never_auto():
    from attnlab.core.backends.reference import reference_attention

    def half_keys(qq, kk, vv, spec):     # a deliberately approximate backend
        return reference_attention(qq, kk, vv, spec)

    register_backend("test-approx", half_keys, Capabilities(exact=False))
    try:
        from attnlab import which_backend
        assert which_backend(q, k, v) != "test-approx"
        assert attention(q, k, v, backend="test-approx").shape == (2, 5, 3)
    finally:
        unregister_backend("test-approx")
    assert "test-approx" not in list_backends()
    with pytest.raises(ValueError, match="backend must be one of"):
        unregister_backend("test-approx")


@pytest.mark.parametrize("backend", ["reference", "sdpa", "tiled", "blocksparse"])
@pytest.mark.parametrize("n_q, n_k", [(3, 5), (5, 3), (4, 4)])
def test_causal_bias_is_a_mask_on_every_backend(backend, n_q, n_k):
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, n_q, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 2, n_k, 8, generator=g, dtype=torch.float64) for _ in range(2))
    for bias in (causal_lower_right(n_q, n_k), causal_upper_left(n_q, n_k)):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        got = attention(q, k, v, mask=bias, backend=backend)
        rows = torch.isfinite(want).all(-1)           # torch gives NaN where no key is left
        assert torch.allclose(got[rows], want[rows], atol=1e-12)
        assert (got[~rows] == 0).all()
        assert torch.allclose(torch.autograd.grad(got[rows].sum(), q)[0],
                              torch.autograd.grad(want[rows].sum(), q)[0], atol=1e-12)
    with pytest.raises(ValueError, match="CausalBias for"):
        attention(q, k, v, mask=causal_lower_right(n_q + 1, n_k))
