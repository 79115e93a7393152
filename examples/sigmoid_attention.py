"""A new attention variant, checked with attnlab's kit and registered as a backend.

Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention"): each weight is ``sigmoid(q.k * scale + b)`` on its own, with ``b = -ln N_k``
so that the weights of a row start near 1/N_k in sum, and no normalisation over the row. With
no row-wise softmax there is no running maximum to carry, so a tiled version only sums tiles.

    python examples/sigmoid_attention.py
"""

from __future__ import annotations

import math

import torch

from attnlab import attention
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.spec import AttentionOutput
from attnlab.testing import check_attention


def _keep(mask, causal, n_q, n_k, device):
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if causal:                                         # bottom-right, as attnlab's contract
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(n_k - n_q)
    if mask is not None:
        keep = keep & mask
    return keep


def sigmoid_reference(q, k, v, *, mask=None, causal=False, scale=None):
    """The spec: one line per formula, in whatever precision it is given."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale - math.log(n_k)          # (B, H, N_q, N_k)
    w = torch.sigmoid(s) * _keep(mask, causal, n_q, n_k, q.device)
    return w @ v                                                 # (B, H, N_q, D_v)


def sigmoid_tiled(q, k, v, *, mask=None, causal=False, scale=None, tile=64):
    """The same, key tile by key tile: O(N_q x tile) memory for the weights."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    keep = _keep(mask, causal, n_q, n_k, q.device)
    out = q.new_zeros(*torch.broadcast_shapes(q.shape[:-2], v.shape[:-2]), n_q, v.shape[-1])
    for j in range(0, n_k, tile):
        s = q @ k[..., j:j + tile, :].transpose(-1, -2) * scale - math.log(n_k)
        out = out + (torch.sigmoid(s) * keep[..., j:j + tile]) @ v[..., j:j + tile, :]
    return out


def main() -> None:
    report = check_attention(sigmoid_tiled, supports={"causal", "mask", "scale"},
                             reference=sigmoid_reference, name="sigmoid_tiled")
    print(report)
    report.raise_for_failures()

    def backend(q, k, v, spec):
        mask = spec.mask
        return AttentionOutput(sigmoid_tiled(q, k, v, mask=mask, causal=spec.causal,
                                             scale=spec.scale))

    # Not softmax attention, so not exact: attnlab runs it only when it is named.
    register_backend("sigmoid", backend, Capabilities(exact=False, masks=frozenset({"causal"})),
                     description="sigmoid attention, b = -ln N_k (Ramapuram et al. 2024)",
                     overwrite=True)
    q = torch.randn(2, 4, 100, 32)
    print("registered; attention(..., backend='sigmoid') ->",
          tuple(attention(q, q, q, causal=True, backend="sigmoid").shape))


if __name__ == "__main__":
    main()
