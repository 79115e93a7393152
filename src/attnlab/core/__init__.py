"""Functional attention: no parameters, no nn.Module.

Shape legend (one layout, declared once)::

    B    batch                       N_q  number of queries
    H    heads                       N_k  number of keys (= values)
    D_k  query/key head dim          D_v  value head dim
    q (B, H, N_q, D_k)   k (B, H, N_k, D_k)   v (B, H, N_k, D_v)   out (B, H, N_q, D_v)
    scores / weights / masks (B, H, N_q, N_k)   lse (B, H, N_q)

Leading dims may be any broadcastable shape; (B, H) is the common case.
"""

from attnlab.core import masks
from attnlab.core.api import attend, attention, which_backend
from attnlab.core.registry import (
    Backend,
    Capabilities,
    list_backends,
    register_backend,
    unregister_backend,
)
from attnlab.core.softmax import masked_softmax, merge_partials
from attnlab.core.spec import AttentionOutput, AttentionSpec

__all__ = [
    "AttentionOutput",
    "AttentionSpec",
    "Backend",
    "Capabilities",
    "attend",
    "attention",
    "list_backends",
    "masked_softmax",
    "masks",
    "merge_partials",
    "register_backend",
    "unregister_backend",
    "which_backend",
]
