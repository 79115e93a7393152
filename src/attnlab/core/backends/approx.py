"""The approximations of :mod:`attnlab.core.approx` as named backends (``exact=False``: they run
only when asked for by name, never through ``backend="auto"``).

    attention(q, k, v, backend="performer")   # 256 fresh orthogonal random features per call
    attention(q, k, v, backend="linear")      # elu + 1 kernel (has no scale or temperature)
    attention(q, k, v, backend="lsh")         # hash buckets, chunks of 64

For control over their parameters (rank, number of features, redrawing, buckets) call the
functions in :mod:`attnlab.core.approx` or use the modules in :mod:`attnlab.nn.efficient`.
"""

from __future__ import annotations

from attnlab.core import approx as A
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.spec import AttentionOutput, AttentionSpec

PERFORMER_FEATURES = 256


def _causal_square(spec: AttentionSpec) -> str | None:
    if spec.causal and spec.n_q != spec.n_k:
        return "its causal form needs N_q == N_k"
    return None


def _performer(q, k, v, spec: AttentionSpec) -> AttentionOutput:
    """Performer FAVOR+ (Choromanski et al. 2021): an approximation of the reference's softmax
    by positive random features, linear in N; unbiased for exp(q.k), not exact."""
    w = A.orthogonal_gaussian(PERFORMER_FEATURES, spec.d_k, dtype=q.dtype, device=q.device)
    return AttentionOutput(A.performer_attention(q, k, v, w, causal=spec.causal,
                                                 scale=spec.score_scale))


def _linear(q, k, v, spec: AttentionSpec) -> AttentionOutput:
    """Kernel (linear) attention (Katharopoulos et al. 2020): elu(x) + 1 in place of the
    reference's exp, a different function, linear in N."""
    return AttentionOutput(A.linear_attention(q, k, v, causal=spec.causal))


def _lsh(q, k, v, spec: AttentionSpec) -> AttentionOutput:
    """LSH bucket attention (Kitaev et al. 2020): the reference's softmax within hash buckets
    only, keys in other buckets dropped; an approximation."""
    return AttentionOutput(A.lsh_attention(q, k, v, scale=spec.score_scale))


_KERNEL = Capabilities(exact=False, masks=frozenset({"causal"}))
register_backend("performer", _performer, _KERNEL, check=_causal_square,
                 description="Performer FAVOR+: unbiased positive random features (approximate)")
register_backend("linear", _linear, _KERNEL, check=_causal_square,
                 description="linear attention, elu+1 kernel: a different kernel (approximate)")
register_backend("lsh", _lsh, Capabilities(exact=False, masks=frozenset()),
                 check=lambda s: None if s.n_q == s.n_k else "it needs N_q == N_k",
                 description="exact softmax within LSH-sorted chunks (approximate)")
