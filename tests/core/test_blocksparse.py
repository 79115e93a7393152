"""blocksparse against the float64 reference: every structured mask kind and combination,
empty rows, lengths not divisible by the block, N_q != N_k, layouts reused across calls."""

import pytest
import torch

import attnlab.core.backends.blocksparse as bs_mod
from attnlab import attention, masks, which_backend
from attnlab.core.layout import BlockLayout, block_layout
from tests.core.test_backends import SMALL_SHAPES, _inputs
from tests.helpers import assert_backend_matches, loose_shift_inputs


@pytest.fixture(autouse=True)
def small_blocks(tiles):
    tiles(blocksparse_sizes=dict(block=(16, 16), band_block=16, run=3, items=4))
    bs_mod._CACHE.clear()


def _structured(name, batch, n_q, n_k):
    off = n_k - n_q
    g = torch.Generator().manual_seed(5)
    return {
        "causal": {"causal": True},
        "window": {"window": (9, 4)},
        "causal+window": {"causal": True, "window": 20},
        "wide-window": {"window": (70, 70)},
        "dilated": {"mask": masks.dilated(3, 30, 30, offset=off)},
        "global": {"mask": masks.or_masks(masks.window(5, 5, off), masks.global_tokens([0, 7]))},
        "segments": {"mask": masks.segments(torch.arange(n_q) * 4 // n_q,
                                            torch.arange(n_k) * 4 // n_k)},
        "key_padding": {"mask": masks.key_padding(torch.tensor([max(n_k - 20, 1), 0][: batch[0]]))},
        "causal&padding": {"causal": True,
                           "mask": masks.key_padding(torch.tensor([n_k, 3][: batch[0]]))},
        "window&dilated": {"window": (40, 0), "mask": masks.dilated(2, offset=off)},
        "bool": {"mask": torch.rand(n_q, n_k, generator=g) > 0.85},
        "flex-style": {"mask": lambda b, h, qi, ki: (ki % 5 == 0) | (qi + off == ki)},
    }[name]


NAMES = ["causal", "window", "causal+window", "wide-window", "dilated", "global", "segments",
         "key_padding", "causal&padding", "window&dilated", "bool", "flex-style"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=lambda s: f"{s[0]}-{s[1]}x{s[2]}")
def test_blocksparse_matches_reference(shape, name, dtype):
    batch, n_q, n_k, d_k, d_v = shape
    q, k, v = _inputs(batch, n_q, n_k, d_k, d_v)
    assert_backend_matches(q, k, v, "blocksparse", dtype, **_structured(name, batch, n_q, n_k))


def test_dropout_matches_reference_on_both_paths():
    q, k, v = (torch.randn(2, 50, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for kw in ({"window": (6, 6)}, {"mask": masks.dilated(2, 10, 10)}):
        res = {}
        for backend in ("reference", "blocksparse"):
            out = attention(q, k, v, dropout_p=0.2, backend=backend,
                            generator=torch.Generator().manual_seed(3), **kw)
            res[backend] = (out, torch.autograd.grad(out.square().sum(), (q, k, v)))
        assert torch.allclose(res["reference"][0], res["blocksparse"][0], atol=1e-12)
        for a, b in zip(res["reference"][1], res["blocksparse"][1]):
            assert torch.allclose(a, b, atol=1e-11)


def test_layout_is_a_mask_function_and_is_reused():
    n = 100
    lay = block_layout(masks.dilated(2), n, n, window=(20, 20), block=(16, 16))
    assert isinstance(lay, BlockLayout) and 0 < lay.density < 1
    q, k, v = (torch.randn(1, 2, n, 8, dtype=torch.float64) for _ in range(3))
    ref = attention(q, k, v, mask=lay, backend="reference")            # any backend takes it
    out = attention(q, k, v, mask=lay, backend="blocksparse")
    assert torch.allclose(ref, out, atol=1e-12)
    assert bs_mod.layout_for(bs_mod_spec(q, k, v, lay)) is lay          # no rebuild


def bs_mod_spec(q, k, v, mask):
    from attnlab.core.spec import build_spec
    return build_spec(q, k, v, mask=mask)


def test_layouts_of_mask_functions_are_cached():
    fn = masks.dilated(3, 10, 10)
    q, k, v = (torch.randn(1, 1, 80, 4) for _ in range(3))
    attention(q, k, v, mask=fn, backend="blocksparse")
    first = list(bs_mod._CACHE.values())[-1]
    attention(q, k, v, mask=fn, backend="blocksparse")
    assert list(bs_mod._CACHE.values())[-1] is first and len(bs_mod._CACHE) == 1


def test_global_token_rows_need_several_items_merged():
    n = 96
    fn = masks.or_masks(masks.window(3, 3), masks.global_tokens(1))
    lay = block_layout(fn, n, n, block=(16, 16))
    assert int(lay.items_round.max()) >= 1                   # query block 0 sees every key block
    q, k, v = (torch.randn(1, n, 8, dtype=torch.float64) for _ in range(3))
    assert torch.allclose(attention(q, k, v, mask=fn, backend="blocksparse"),
                          attention(q, k, v, mask=fn, backend="reference"), atol=1e-12)


def test_blocksparse_refuses_unstructured_requests():
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="needs a structured mask"):
        attention(q, q, q, backend="blocksparse")
    with pytest.raises(ValueError, match="float masks"):
        attention(q, q, q, mask=torch.zeros(4, 4), backend="blocksparse")


def test_auto_picks_blocksparse_for_narrow_bands_only(tiles):
    tiles(blocksparse_sizes=dict(band_block=64))
    q, k, v = (torch.randn(1, 8, 16384, 8) for _ in range(3))
    assert which_backend(q, k, v, window=(256, 256)) == "blocksparse"
    assert which_backend(q, k, v, causal=True, window=(256, 0)) == "blocksparse"
    # SDPA skips the triangle itself
    assert which_backend(q, k, v, causal=True) == "sdpa"
    small = [t[..., :64, :] for t in (q, k, v)]
    assert which_backend(*small, window=(256, 256)) == "sdpa"


@pytest.mark.parametrize("scale", [1.0, 4.0, 60.0])
def test_band_path_shift_bound_far_from_the_true_max(scale):
    # Queries and keys in orthogonal halves of the head dim: every score is 0 while the
    # Cauchy-Schwarz shift |q||k| grows with `scale`; at 60 the row sums underflow and the run
    # is redone with the exact max. The result must not depend on it.
    q, k, v = loose_shift_inputs(scale)
    for dtype in (torch.float64, torch.float32):
        ref = attention(q, k, v, window=(10, 10), backend="reference", return_lse=True)
        out = attention(q.to(dtype), k.to(dtype), v.to(dtype), window=(10, 10),
                        backend="blocksparse", return_lse=True)
        tol = 1e-10 if dtype == torch.float64 else 1e-5
        assert torch.allclose(out.out.double(), ref.out, atol=tol, rtol=tol)
        assert torch.allclose(out.lse.double(), ref.lse, atol=tol * 100, rtol=tol)
