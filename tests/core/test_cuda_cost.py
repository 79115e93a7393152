"""auto on a CUDA GPU picks from the costs measured there (attnlab.core.cuda_cost).

No GPU is needed: the request's spec is built from CPU tensors and its device replaced, which
is all the registry reads to choose (nothing runs). The expected choices are the ones the H200
measurements imply (docs/benchmarks.md, "GPU"): SDPA for plain and causal, the Triton band
kernel for windows, and Triton where SDPA cannot serve (lse, softcap, per-sequence lengths).
"""

import dataclasses
import itertools

import pytest
import torch

from attnlab import masks
from attnlab.core.cuda_cost import RATES, _pairs_below, cuda_cost
from attnlab.core.registry import get_backend, select_backend
from attnlab.core.spec import build_spec


def _cuda_spec(n=4096, d=64, dtype=torch.bfloat16, grad=True, **kw):
    q = torch.empty(4, 16, n, d, dtype=dtype, requires_grad=grad)
    spec = build_spec(q, q, q, **kw)
    return dataclasses.replace(spec, device=torch.device("cuda", 0))


@pytest.mark.parametrize("kw,want", [
    ({}, "sdpa"),
    ({"causal": True}, "sdpa"),
    ({"window": 256}, "triton"),
    ({"window": (256, 0)}, "triton"),
    ({"return_lse": True}, "triton"),
    ({"softcap": 30.0, "causal": True}, "triton"),
    # SDPA's masked kernel (4.2 ps per score, fwd+bwd) against Triton's dense rate (3.9-4.5):
    # SDPA, narrowly
    ({"mask": masks.key_padding(torch.tensor([4000, 3000, 4096, 10]))}, "sdpa"),
    ({"return_weights": True}, "reference"),
])
def test_auto_on_cuda_follows_the_measured_costs(kw, want):
    assert select_backend("auto", _cuda_spec(**kw)).name == want


def test_auto_on_cuda_in_float32_never_picks_the_refused_block_sparse_kernel():
    spec = _cuda_spec(dtype=torch.float32, window=256)
    assert select_backend("auto", spec).name == "triton"
    reason = get_backend("triton_blocksparse").why_not(spec)
    assert "float32" in reason and "bfloat16" in reason
    # the same request in bfloat16 is served by it when named
    assert get_backend("triton_blocksparse").why_not(_cuda_spec(window=256)) is None


def test_the_forward_rate_applies_without_gradients():
    with_grad = cuda_cost("triton", _cuda_spec(grad=True))
    without = cuda_cost("triton", _cuda_spec(grad=False))
    assert without < with_grad / 3


def test_a_band_is_priced_by_the_scores_it_keeps():
    dense = cuda_cost("triton", _cuda_spec(n=16384, grad=False))
    causal = cuda_cost("triton", _cuda_spec(n=16384, grad=False, causal=True))
    window = cuda_cost("triton", _cuda_spec(n=16384, grad=False, window=256))
    assert 0.4 < causal / dense < 0.7            # half the scores, a higher rate per score
    assert window < dense / 10


def test_backends_without_a_row_keep_their_own_model():
    assert cuda_cost("reference", _cuda_spec()) is None
    assert all(set(t) == {64, 128} for t in RATES.values())


@pytest.mark.parametrize("n_q,n_k,left,right",
                         list(itertools.product([1, 5, 17], [1, 4, 20], [0, 3, 100], [0, 2, 100])))
def test_band_pair_count_matches_a_direct_count(n_q, n_k, left, right):
    off = n_k - n_q
    direct = sum(1 for i in range(n_q) for j in range(n_k)
                 if i + off - left <= j <= i + off + right)
    assert _pairs_below(off + right, n_q, n_k) - _pairs_below(off - left - 1, n_q, n_k) == direct


def test_the_cost_table_is_the_measured_one():
    """RATES is what scripts/gpu_check.py derives from the committed H200 timings."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "scripts" / "gpu_check.py"), "--costs-from",
                          str(root / "benchmarks/results/gpu/timings_h200.jsonl")],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert ast.literal_eval(out.split("=", 1)[1].strip()) == RATES
