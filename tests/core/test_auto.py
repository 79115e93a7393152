"""backend='auto' picks the fastest exact backend able to serve the request."""

import pytest
import torch

from attnlab import attention, list_backends, which_backend


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
