"""Approximate attention: low-rank (Linformer), kernel (Performer FAVOR+, linear) and
content-based sparse (LSH buckets). None of them is ever chosen by ``backend="auto"``.

Shapes follow the core: ``q (..., N_q, D)``, ``k (..., N_k, D)``, ``v (..., N_k, D_v)``.

Error behaviour, in one line each (measured in docs/efficient.md):

* Linformer replaces the N_k keys and values by k learned mixtures ``E K``, ``F V``: exact only
  in special cases (E = F = I); its quality comes from training E and F.
* Performer estimates ``exp(q·k / sqrt(D))`` by ``phi(q)·phi(k)`` with m positive random
  features: unbiased, relative error falling like ``1/sqrt(m)``.
* Linear attention (elu + 1) swaps the softmax kernel for another one: it is a different model,
  not an estimate of softmax attention, and its error does not shrink.
* LSH attention is exact softmax attention restricted to the keys that land in the query's
  chunk of hash-sorted keys: error falls as the chunks grow and is 0 when one chunk holds all.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.core.softmax import merge_partials


# ----------------------------------------------------------------------------- low rank
def linformer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, e: torch.Tensor,
                        f: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Linformer (Wang et al. 2020): ``softmax(Q (E K)ᵀ · scale) (F V)``.

    Args:
        e, f: ``(k_rank, N_k)`` projections along the sequence (shared by batch and heads), or
            with leading dims broadcasting against q's.

    Returns:
        ``(..., N_q, D_v)``. Cost O(N_q · k_rank · D) time and memory instead of O(N_q · N_k).
    """
    n_k = k.shape[-2]
    for name, p in (("e", e), ("f", f)):
        if p.shape[-1] != n_k:
            raise ValueError(f"{name} must have shape (k_rank, N_k) with N_k = {n_k}, got "
                             f"{tuple(p.shape)}; build it for this sequence length")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k_low = e @ k                                                    # (..., k_rank, D)
    v_low = f @ v                                                    # (..., k_rank, D_v)
    a = torch.softmax((q @ k_low.transpose(-1, -2)) * scale, dim=-1)  # (..., N_q, k_rank)
    return a @ v_low


def pooling_projection(n: int, rank: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """``(rank, n)`` average pooling over ``rank`` contiguous segments: a parameter-free E/F
    that is exact at ``rank = n`` (the identity)."""
    edges = torch.linspace(0, n, rank + 1, device=device).round().long()
    p = torch.zeros(rank, n, dtype=dtype, device=device)
    for r in range(rank):
        a, b = int(edges[r]), max(int(edges[r + 1]), int(edges[r]) + 1)
        p[r, a:b] = 1.0 / (b - a)
    return p


# ----------------------------------------------------------------------------- kernels
def orthogonal_gaussian(num_features: int, dim: int, generator: torch.Generator | None = None,
                        dtype=torch.float32, device=None) -> torch.Tensor:
    """``(m, D)`` random features, orthogonal within blocks of D rows, each row with the norm
    of a D-dimensional standard Gaussian (so every row is marginally N(0, I); Choromanski et
    al. 2021, section 4)."""
    blocks = []
    for _ in range(-(-num_features // dim)):
        g = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
        qmat, r = torch.linalg.qr(g)
        # Sign fix: without it QR's Q is not uniformly (Haar) distributed, and the estimator
        # built on it is biased (Mezzadri 2007).
        qmat = qmat * torch.sign(torch.diagonal(r)).unsqueeze(0)
        blocks.append(qmat.T)
    w = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, dim, generator=generator, dtype=torch.float64).norm(dim=-1)
    return (w * norms[:, None]).to(dtype=dtype, device=device)


def favor_features(x: torch.Tensor, w: torch.Tensor, is_query: bool) -> torch.Tensor:
    """Positive random features ``phi(x) = exp(w·x − |x|²/2) / sqrt(m)`` with
    ``E[phi(x)·phi(y)] = exp(x·y)``.

    A constant factor per query row, or one for all keys, cancels in the attention ratio, so the
    exponent is shifted by its max (per row for queries, overall for keys) to avoid overflow.
    """
    proj = x @ w.T                                                   # (..., N, m)
    sq = 0.5 * x.square().sum(-1, keepdim=True)                      # (..., N, 1)
    shift = proj.amax(-1, keepdim=True) if is_query else proj.amax(dim=(-1, -2), keepdim=True)
    return torch.exp(proj - sq - shift.detach()) / math.sqrt(w.shape[0])


def elu_features(x: torch.Tensor) -> torch.Tensor:
    """``elu(x) + 1`` (Katharopoulos et al. 2020): positive, so attention weights stay >= 0."""
    return F.elu(x) + 1.0


def kernel_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor,
                     causal: bool = False, chunk: int = 64, eps: float = 1e-12) -> torch.Tensor:
    """``out_i = sum_j (phi_q_i · phi_k_j) v_j / sum_j phi_q_i · phi_k_j`` in O(N · m · D_v).

    Non-causal: one product ``phi_k^T V`` of shape ``(m, D_v)``. Causal (N_q == N_k): the prefix
    sums ``S_i = sum_{j<=i} phi_k_j v_jᵀ`` are carried from chunk to chunk, and each chunk adds
    its own masked quadratic part, so memory stays O(chunk² + m · D_v) per head.
    """
    if not causal:
        kv = phi_k.transpose(-1, -2) @ v                              # (..., m, D_v)
        z = phi_k.sum(-2)                                             # (..., m)
        num = phi_q @ kv                                              # (..., N_q, D_v)
        den = (phi_q @ z.unsqueeze(-1)).clamp_min(eps)                # (..., N_q, 1)
        return num / den
    n = phi_q.shape[-2]
    if phi_k.shape[-2] != n:
        raise ValueError("causal kernel attention needs N_q == N_k; got "
                         f"{n} and {phi_k.shape[-2]}")
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], v.shape[-1])   # (..., m, D_v)
    z = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])                     # (..., m)
    outs = []
    tril = torch.ones(chunk, chunk, dtype=torch.bool, device=v.device).tril()
    for c0 in range(0, n, chunk):
        rows = slice(c0, c0 + chunk)
        pq, pk, vc = phi_q[..., rows, :], phi_k[..., rows, :], v[..., rows, :]
        c = pq.shape[-2]
        intra = (pq @ pk.transpose(-1, -2)).masked_fill(~tril[:c, :c], 0.0)     # (..., c, c)
        num = pq @ state + intra @ vc
        den = (pq @ z.unsqueeze(-1) + intra.sum(-1, keepdim=True)).clamp_min(eps)
        outs.append(num / den)
        state = state + pk.transpose(-1, -2) @ vc
        z = z + pk.sum(-2)
    return torch.cat(outs, dim=-2)


def performer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, features: torch.Tensor,
                        causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Performer FAVOR+ (Choromanski et al. 2021) with the given ``(m, D)`` features
    (see :func:`orthogonal_gaussian`). Estimates ``softmax(q·k · scale) v``."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    root = math.sqrt(scale)                       # exp(scale q·k) = exp((root q)·(root k))
    phi_q = favor_features(q * root, features, is_query=True)
    phi_k = favor_features(k * root, features, is_query=False)
    return kernel_attention(phi_q, phi_k, v, causal=causal)


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     causal: bool = False) -> torch.Tensor:
    """Linear attention with the ``elu + 1`` feature map (Katharopoulos et al. 2020)."""
    return kernel_attention(elu_features(q), elu_features(k), v, causal=causal)


# ----------------------------------------------------------------------------- by content
def lsh_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, n_buckets: int = 8,
                  chunk: int = 64, n_hashes: int = 1, generator: torch.Generator | None = None,
                  scale: float | None = None) -> torch.Tensor:
    """Attention within hash buckets, in the spirit of Reformer (Kitaev et al. 2020).

    Queries and keys are hashed with the same random rotation (angular LSH:
    ``h(x) = argmax[xR; −xR]`` on unit vectors), both are sorted by (bucket, position) and cut
    into chunks; the i-th query chunk attends exactly (softmax) to key chunks i − 1 and i.
    Similar directions share buckets, so the keys with large scores tend to be in reach.
    With ``n_hashes > 1`` the rounds are folded by :func:`merge_partials` as if their key sets
    were disjoint (a key found in r rounds counts r times, as in Reformer before its
    correction). Needs N_q == N_k.
    """
    n, d = q.shape[-2], q.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(f"lsh_attention needs N_q == N_k, got {n} and {k.shape[-2]}")
    if n_buckets < 2 or n_buckets % 2:
        raise ValueError(f"n_buckets must be an even number >= 2, got {n_buckets}")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = min(chunk, n)
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    lead = q.shape[:-2]
    out = lse = None
    for _ in range(n_hashes):
        rot = torch.randn(d, n_buckets // 2, generator=generator, dtype=torch.float64).to(q)
        results = []
        for x in (q, k):
            proj = F.normalize(x, dim=-1) @ rot                                   # (..., N, nb/2)
            bucket = torch.cat([proj, -proj], dim=-1).argmax(-1)                  # (..., N)
            key = bucket * n + torch.arange(n, device=x.device)                   # stable order
            results.append(key.argsort(dim=-1))
        q_order, k_order = results                                                # (..., N)

        def take(x, order):
            return torch.take_along_dim(x, order.unsqueeze(-1), dim=-2)

        qs, ks, vs = take(q, q_order), take(k, k_order), take(v, k_order)
        if pad:
            qs, ks, vs = (F.pad(t, (0, 0, 0, pad)) for t in (qs, ks, vs))
        qc = qs.view(*lead, n_chunks, chunk, d)                                   # (..., C, c, D)
        kc, vc = ks.view(*lead, n_chunks, chunk, d), vs.view(*lead, n_chunks, chunk, v.shape[-1])
        kk = torch.cat([kc.roll(1, dims=-3), kc], dim=-2)                         # chunk i-1, i
        vv = torch.cat([vc.roll(1, dims=-3), vc], dim=-2)
        valid = torch.arange(n_chunks * chunk, device=q.device).view(n_chunks, chunk) < n
        kvalid = torch.cat([valid.roll(1, dims=0), valid], dim=-1)               # (C, 2c)
        if n_chunks == 1:
            kvalid[:, :chunk] = False            # the "previous" chunk would be itself again
        s = (qc @ kk.transpose(-1, -2)) * scale                                   # (..., C, c, 2c)
        s = s.masked_fill(~kvalid[:, None, :], float("-inf"))
        lse_s = torch.logsumexp(s, dim=-1)                                        # (..., C, c)
        o = torch.softmax(s, dim=-1) @ vv                                         # (..., C, c, D_v)
        o = o.reshape(*lead, -1, v.shape[-1])[..., :n, :]
        lse_s = lse_s.reshape(*lead, -1)[..., :n]
        inv = q_order.argsort(dim=-1)                                             # undo the sort
        o, lse_s = take(o, inv), torch.take_along_dim(lse_s, inv, dim=-1)
        if out is None:
            out, lse = o, lse_s
        else:
            out, lse = merge_partials(out, lse, o, lse_s)
    return out
