"""backend='auto' picks the fastest exact backend able to serve the request."""

import pytest
import torch

from attnlab import attention, list_backends, masks, which_backend


def _qkv(n, n_k=None, d=64):
    n_k = n if n_k is None else n_k
    return torch.randn(1, 8, n, d), torch.randn(1, 8, n_k, d), torch.randn(1, 8, n_k, d)


def test_auto_choices():
    q, k, v = _qkv(1024)
    assert which_backend(q, k, v) == "sdpa"
    assert which_backend(q, k, v, causal=True) == "sdpa"
    assert which_backend(q, k, v, return_weights=True) == "reference"
    assert which_backend(q, k, v, return_lse=True) == "tiled"
    assert which_backend(q, k, v, dropout_p=0.1) == "tiled"
    assert which_backend(q, k, v, return_weights=True, dropout_p=0.1) == "reference"
    tiny = _qkv(16)
    assert which_backend(*tiny, return_lse=True) == "reference"   # fixed costs dominate


def test_auto_prefers_a_sparse_backend_for_a_narrow_band_on_long_sequences():
    q, k, v = _qkv(16384, d=8)
    assert which_backend(q, k, v, window=(256, 256)) == "blocksparse"
    assert which_backend(q, k, v, window=(256, 256), return_lse=True) == "blocksparse"
    q, k, v = _qkv(256, d=8)
    assert which_backend(q, k, v, window=(256, 256)) == "sdpa"       # the band covers it all


def test_list_backends_declares_capabilities():
    b = list_backends()
    assert list(b)[:4] == ["reference", "sdpa", "tiled", "blocksparse"]
    assert b["reference"].capabilities.weights and b["tiled"].capabilities.lse
    assert all(b[n].capabilities.exact for n in ("reference", "sdpa", "tiled", "blocksparse"))
    assert not any(b[n].capabilities.exact for n in ("performer", "linear", "lsh"))


def test_which_backend_takes_exactly_the_keywords_of_attention():
    import inspect

    def keywords(fn):
        return {n: p.default for n, p in inspect.signature(fn).parameters.items()
                if p.kind is p.KEYWORD_ONLY}

    assert keywords(which_backend) == keywords(attention)
    q = torch.randn(1, 4, 64, 16)
    kv = torch.randn(1, 2, 64, 16)
    sinks = torch.zeros(4)
    # what attention() itself would run, for options that once had to go through build_spec
    assert which_backend(q, kv, kv, enable_gqa=True, sinks=sinks, softcap=30.0) in (
        "tiled", "reference")
    assert which_backend(q, q, q, score_mod=lambda s, b, h, i, j: s + (i - j)) in (
        "tiled", "reference", "blocksparse")
    with pytest.raises(TypeError):
        which_backend(q, q, q, casual=True)                    # a typo is not swallowed
    with pytest.raises(ValueError, match="temperature"):
        which_backend(q, q, q, temperature=-1.0)               # the same checks as attention()


def test_linear_memory_selection_never_builds_an_n_by_n_tensor():
    """select_backend(linear_memory=True) (what sharded all-to-all attention uses, each rank
    holding the whole sequence) picks only backends that declare linear memory for the
    request: no dense mask for SDPA, the banded path only for block-sparse."""
    from attnlab.core.registry import get_backend, select_backend
    from attnlab.core.spec import build_spec

    n = 4096
    q = torch.randn(1, 2, n, 64)
    pad = torch.ones(1, 1, 1, n, dtype=torch.bool)
    pad[..., -100:] = False
    requests = {"causal": dict(causal=True), "padding": dict(causal=True, mask=pad),
                "documents": dict(mask=masks.segments(torch.arange(n)[None] // 1000)),
                "band": dict(causal=True, window=(256, 0)),
                "dilated": dict(mask=masks.dilated(2))}
    picked = {}
    for name, options in requests.items():
        spec = build_spec(q, q, q, return_lse=True, **options)
        chosen = select_backend("auto", spec, linear_memory=True)
        assert chosen.linear_memory(spec), name
        picked[name] = chosen.name
    assert picked["padding"] == picked["documents"] == picked["dilated"] == "tiled"
    assert not get_backend("blocksparse").linear_memory(
        build_spec(q, q, q, mask=masks.dilated(2)))
    assert not get_backend("sdpa").linear_memory(build_spec(q, q, q, mask=pad))
    assert get_backend("reference").linear_memory is None          # builds the scores
