"""The Triton kernels on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1, set by
tests/conftest.py): outputs, lse and dQ, dK, dV against the float64 reference with the same
relative rule as every backend (tests/helpers.py). Tiles are shrunk to 16 so that lengths 17
and 129 cross them; N_q != N_k both ways; head dims 40 (padded to a 64-wide tile) and 64."""

import subprocess
import sys

import pytest
import torch

from attnlab import attention, masks, which_backend
from attnlab.core.layout import block_layout
from tests.helpers import assert_backend_matches


@pytest.fixture(autouse=True)
def _small_tiles(tiles):
    tiles(triton_sizes=dict(block_m=16, block_n=16, sparse_block=(16, 16)))


def _qkv(b, h, n_q, n_k, d_k, d_v, h_kv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    h_kv = h_kv or h
    return (torch.randn(b, h, n_q, d_k, generator=g, dtype=torch.float64),
            torch.randn(b, h_kv, n_k, d_k, generator=g, dtype=torch.float64),
            torch.randn(b, h_kv, n_k, d_v, generator=g, dtype=torch.float64))


# (B, H, N_q, N_k, D_k, D_v)
SHAPES = {
    "1x1": (1, 1, 1, 1, 40, 40),
    "17": (2, 2, 17, 17, 64, 64),
    "17x129": (2, 1, 17, 129, 64, 40),        # N_q < N_k
    "129x17": (1, 2, 129, 17, 40, 64),        # N_q > N_k: causal leaves the first rows empty
}

# Every mask kind of the dense kernel. Lengths include an empty sequence (fully masked rows).
DENSE = {
    "none": lambda s: {},
    "causal": lambda s: {"causal": True},
    "window": lambda s: {"window": (5, 3)},
    "causal+window": lambda s: {"causal": True, "window": 7},
    "key_padding": lambda s: {
        "mask": masks.key_padding(torch.tensor([max(s[3] - 4, 1), 0][:s[0]]))},
    "padding+causal": lambda s: {"causal": True,
                                 "mask": masks.key_padding(torch.tensor([s[3], 1][:s[0]]))},
    "varlen causal": lambda s: {"mask": masks.varlen(torch.tensor([s[2], 1][:s[0]]),
                                                     torch.tensor([max(s[3] - 3, 1), s[3]][:s[0]]),
                                                     causal=True)},
    "softcap": lambda s: {"softcap": 2.0, "window": (4, 4)},
}


# Every mask kind on both N_q != N_k shapes (which cross tiles); the tiny and the square shape
# with the masks whose edge cases they hit (a lone key, an empty sequence, per-sequence ends).
CASES = ([(shape, mask) for shape in ("17x129", "129x17") for mask in DENSE]
         + [(shape, mask) for shape in ("1x1", "17")
            for mask in ("none", "causal", "key_padding", "varlen causal")])


@pytest.mark.parametrize("shape,mask", CASES)
def test_triton_matches_the_reference_float32(shape, mask):
    s = SHAPES[shape]
    q, k, v = _qkv(*s)
    assert_backend_matches(q, k, v, "triton", torch.float32, **DENSE[mask](s))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mask", ["causal", "varlen causal", "softcap"])
def test_triton_half_precision(dtype, mask):
    s = (2, 2, 33, 47, 40, 24)
    q, k, v = _qkv(*s)
    assert_backend_matches(q, k, v, "triton", dtype, **DENSE[mask](s))


def test_triton_crosses_many_tiles():
    s = (1, 2, 129, 129, 64, 64)
    q, k, v = _qkv(*s)
    assert_backend_matches(q, k, v, "triton", torch.float32, causal=True, window=(40, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_grouped_query_heads(dtype):
    q, k, v = _qkv(2, 4, 17, 29, 40, 40, h_kv=2)
    assert_backend_matches(q, k, v, "triton", dtype, enable_gqa=True, causal=True,
                           softcap=3.0)
    q, k, v = _qkv(1, 3, 9, 20, 64, 64, h_kv=1)              # multi-query
    assert_backend_matches(q, k, v, "triton", dtype, enable_gqa=True,
                           mask=masks.key_padding(torch.tensor([7])))


def test_fully_masked_rows_give_zero_and_minus_inf_never_nan():
    q, k, v = (t.float().requires_grad_() for t in _qkv(2, 1, 20, 18, 16, 8))
    res = attention(q, k, v, backend="triton", return_lse=True,
                    mask=masks.key_padding(torch.tensor([18, 0])))
    assert torch.equal(res.out[1], torch.zeros_like(res.out[1]))
    assert torch.isneginf(res.lse[1]).all() and torch.isfinite(res.lse[0]).all()
    (res.out.sum() + torch.where(torch.isfinite(res.lse), res.lse, 0).sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[1], torch.zeros_like(q.grad[1]))
    assert torch.equal(k.grad[1], torch.zeros_like(k.grad[1]))


# Block-sparse: every mask the layouts express.
SPARSE = {
    "causal": lambda s: {"causal": True},
    "window": lambda s: {"window": (6, 2)},
    "dilated": lambda s: {"mask": masks.dilated(3, 24, 24, offset=s[3] - s[2])},
    "segments": lambda s: {"mask": masks.segments(torch.arange(s[2]) * 3 // s[2],
                                                  torch.arange(s[3]) * 3 // s[3])},
    "window|global": lambda s: {"mask": masks.or_masks(masks.window(4, 4, offset=s[3] - s[2]),
                                                       masks.global_tokens(2))},
    "bool": lambda s: {"mask": torch.rand(s[0], 1, s[2], s[3],
                                          generator=torch.Generator().manual_seed(3)) > 0.5},
    "key_padding+causal": lambda s: {"causal": True,
                                     "mask": masks.key_padding(torch.tensor([s[3] - 5, 0]))},
}


@pytest.mark.parametrize("mask", list(SPARSE))
@pytest.mark.parametrize("shape", ["17x129", "129x17", "45"])
def test_triton_blocksparse_matches_the_reference(shape, mask):
    s = {**SHAPES, "45": (2, 2, 45, 45, 40, 24)}[shape]
    s = (2, *s[1:])                                         # two sequences: padding has two
    q, k, v = _qkv(*s)
    assert_backend_matches(q, k, v, "triton_blocksparse", torch.float32, **SPARSE[mask](s))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_triton_blocksparse_half_precision_gqa_softcap(dtype):
    q, k, v = _qkv(2, 4, 40, 40, 64, 64, h_kv=2)
    assert_backend_matches(q, k, v, "triton_blocksparse", dtype, enable_gqa=True,
                           softcap=4.0, mask=masks.dilated(2, 16, 16))


def test_triton_blocksparse_takes_a_layout_and_per_head_masks():
    q, k, v = _qkv(2, 2, 50, 50, 40, 40)
    lay = block_layout(masks.dilated(2), 50, 50, window=(12, 12), block=(16, 32))
    assert_backend_matches(q, k, v, "triton_blocksparse", torch.float32, mask=lay)

    def per_head(b, h, q_idx, kv_idx):                    # a different band per (b, h)
        return (q_idx - kv_idx).abs() <= 2 + 5 * h + 3 * b

    assert_backend_matches(q, k, v, "triton_blocksparse", torch.float32, mask=per_head)


def test_the_kernels_equal_the_cpu_backends_on_the_same_layout():
    q, k, v = (t.float() for t in _qkv(1, 2, 70, 70, 32, 16))
    kw = {"mask": masks.dilated(2, 20, 20), "return_lse": True}
    a = attention(q, k, v, backend="triton_blocksparse", **kw)
    b = attention(q, k, v, backend="blocksparse", **kw)
    assert torch.allclose(a.out, b.out, atol=1e-5) and torch.allclose(a.lse, b.lse, atol=1e-5)


def test_refusals_name_what_to_use_instead():
    q, k, v = (t.float() for t in _qkv(1, 1, 8, 8, 16, 16))
    with pytest.raises(ValueError, match="triton_blocksparse takes any"):
        attention(q, k, v, backend="triton", mask=masks.dilated(2))
    with pytest.raises(ValueError, match="float"):
        attention(q, k, v, backend="triton", mask=torch.zeros(8, 8))
    with pytest.raises(ValueError, match="dtype torch.float64"):
        attention(q.double(), k.double(), v.double(), backend="triton")
    with pytest.raises(ValueError, match="dropout"):
        attention(q, k, v, backend="triton", dropout_p=0.1)
    with pytest.raises(ValueError, match="structured mask"):
        attention(q, k, v, backend="triton_blocksparse")
    lay = block_layout(masks.dilated(2), 8, 8, block=(8, 8))
    with pytest.raises(ValueError, match="power-of-two sides >= 16"):
        attention(q, k, v, backend="triton_blocksparse", mask=lay)


def test_auto_never_picks_an_unmeasured_kernel():
    q, k, v = (t.float() for t in _qkv(1, 2, 64, 64, 16, 16))
    for kw in ({}, {"causal": True}, {"window": (4, 4)}, {"softcap": 3.0, "return_lse": True}):
        assert not which_backend(q, k, v, **kw).startswith("triton")


def _run(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env=env)


def test_without_the_interpreter_cpu_tensors_are_refused_with_the_reason():
    code = ("import torch, attnlab\n"
            "q = torch.randn(1, 1, 4, 8)\n"
            "try:\n"
            "    attnlab.attention(q, q, q, backend='triton')\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    res = _run(code, {"TRITON_INTERPRET": "0"})
    assert res.returncode == 0, res.stderr
    assert "it runs on CUDA tensors, got cpu" in res.stdout


def test_attnlab_works_without_triton_and_says_why_the_backend_is_unavailable():
    code = ("import sys; sys.modules['triton'] = None\n"      # as if it were not installed
            "import torch, attnlab\n"
            "from attnlab.cli import main\n"
            "q = torch.randn(1, 1, 4, 8)\n"
            "assert attnlab.attention(q, q, q).shape == (1, 1, 4, 8)\n"
            "try:\n"
            "    attnlab.attention(q, q, q, backend='triton')\n"
            "except ValueError as e:\n"
            "    print('refused:', e)\n"
            "main(['backends'])\n")
    res = _run(code, {})
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stdout.split())                     # rich wraps at the console width
    assert "refused:" in said and "triton is not installed" in said
    assert "unavailable here: triton is not installed (pip install 'attnlab[gpu]')" in said


def test_the_gpu_check_is_one_prepared_command():
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
    dry = subprocess.run([sys.executable, str(script), "--dry-run"], capture_output=True,
                         text=True, timeout=120)
    assert dry.returncode == 0 and "triton_blocksparse" in dry.stdout, dry.stderr
    if not torch.cuda.is_available():                     # the CI machine: one line, exit 2
        res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 2 and res.stderr.strip().startswith("gpu_check: no CUDA")


def test_the_conformance_kit_runs_where_it_is_told():
    from attnlab.testing import check_backend

    rep = check_backend("sdpa", device="cpu", dtypes=[torch.float32])
    assert rep.passed and len(rep.results) > 10


def test_the_launch_grid_figure_is_drawn(tmp_path):
    from attnlab.plots.kernels import save_launch_grid

    save_launch_grid(tmp_path / "grid.png", n=128, block=32, window=40)
    assert (tmp_path / "grid.png").stat().st_size > 10_000
