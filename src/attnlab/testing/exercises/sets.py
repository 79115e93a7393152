"""Chapter 12's checks: images cut into patches, the attention a ViT computes, and the
softmax of dense graph attention."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, close


def _patches(fn: Callable) -> Verdict:
    """``fn(images (B, H, W), p) -> (B, H/p * W/p, p * p)``, patches and their pixels row by
    row."""
    for B, H, W, p in ((2, 8, 8, 2), (1, 6, 9, 3)):
        img = torch.arange(B * H * W, dtype=torch.float64).reshape(B, H, W)
        got = torch.as_tensor(fn(img, p))
        want = torch.stack([img[:, r:r + p, c:c + p].reshape(B, p * p)
                            for r in range(0, H, p) for c in range(0, W, p)], dim=1)
        if tuple(got.shape) != tuple(want.shape):
            return Verdict("12.1", False, f"for {B} images of {H}x{W} and p = {p}, expected "
                           f"{tuple(want.shape)}, got {tuple(got.shape)}")
        if not torch.equal(got, want):
            bad = int((got != want).any(-1).any(0).nonzero()[0])
            return Verdict("12.1", False, f"patch {bad} of a {H}x{W} image with p = {p} should "
                           f"hold pixels {want[0, bad].long().tolist()} (a p x p square), got "
                           f"{got[0, bad].long().tolist()}")
    return Verdict("12.1", True, "square and non-square images")


def _vit_weights(fn: Callable) -> Verdict:
    """``fn(image, patch, layers, heads)``: attention weights a ViT computes per image."""
    for args in ((224, 16, 12, 12), (32, 4, 6, 8), (8, 2, 2, 4)):
        image, patch, layers, heads = args
        want = layers * heads * ((image // patch) ** 2 + 1) ** 2
        got = fn(*args)
        if got != want:
            no_cls = layers * heads * ((image // patch) ** 2) ** 2
            hint = " (that leaves out the class token)" if got == no_cls else ""
            return Verdict("12.2", False, f"for image {image}, patch {patch}, {layers} layers, "
                           f"{heads} heads: {want:,} weights, you said {got:,}{hint}")
    return Verdict("12.2", True, "three configurations")


def _graph_softmax(fn: Callable) -> Verdict:
    """``fn(e (N, N), adjacency (N, N) bool) -> alpha``: softmax over each row's neighbours."""
    g = torch.Generator().manual_seed(14)
    n = 6
    e = torch.randn(n, n, generator=g, dtype=torch.float64)
    adj = (torch.rand(n, n, generator=g) < 0.4) | torch.eye(n, dtype=torch.bool)
    want = torch.softmax(e.masked_fill(~adj, -math.inf), dim=-1)
    got = torch.as_tensor(fn(e, adj))
    if tuple(got.shape) != (n, n):
        return Verdict("12.3", False, f"expected ({n}, {n}) weights, got {tuple(got.shape)}")
    if (got[~adj].abs() > 0).any():
        return Verdict("12.3", False, "a node gives weight to a non-neighbour")
    if not close(got, want):
        sums = got.double().sum(-1)
        return Verdict("12.3", False, f"each node's weights over its neighbours should sum to "
                       f"1; node 0's sum to {float(sums[0]):.3f}")
    return Verdict("12.3", True, f"{n} nodes, {int(adj.sum())} edges with self-loops")


CHECKS = {"12.1": _patches, "12.2": _vit_weights, "12.3": _graph_softmax}
