"""What the spawned ranks run (importable by the child processes). Each case is a dict that
both the ranks and the test build the same inputs from (seeded), so a test compares a rank's
gathered result with a single-process reference computed in the test itself."""

from __future__ import annotations

import torch

from attnlab import masks
from attnlab.distributed import gather, ring_attention, sequence_parallel, shard, ulysses_attention
from attnlab.distributed import layout as L

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def inputs(case: dict):
    """Whole-sequence q, k, v, the key lengths, the cotangents of out and lse (float64)."""
    g = torch.Generator().manual_seed(case.get("seed", 0))
    b, h, h_kv, d, d_v = 2, case.get("heads", 4), case.get("kv_heads", 2), case.get("d", 8), 5
    n_q, n_k = case["n_q"], case.get("n_k", case["n_q"])
    spread = case.get("logit_std", 1.0) ** 0.5       # q.k / sqrt(d) has std spread^2
    q = torch.randn(b, h, n_q, d, generator=g, dtype=torch.float64) * spread
    k = torch.randn(b, h_kv, n_k, d, generator=g, dtype=torch.float64) * spread
    v = torch.randn(b, h_kv, n_k, d_v, generator=g, dtype=torch.float64)
    lengths = torch.tensor(case.get("lengths", [n_k, n_k]))
    c_out = torch.randn(b, h, n_q, d_v, generator=g, dtype=torch.float64)
    c_lse = torch.randn(b, h, n_q, generator=g, dtype=torch.float64)
    return q, k, v, lengths, c_out, c_lse


def mask_fn(case: dict):
    """The case's mask function of global positions (or None)."""
    if case.get("mask") == "segments":
        n = case.get("n_k", case["n_q"])
        seg = (torch.arange(n) * 3 // max(n, 1)).expand(2, n)          # three documents
        return masks.segments(seg)
    if case.get("mask") == "dilated":
        return masks.dilated(2)
    if case.get("mask") == "per_head":                 # head h sees 2h + 1 keys either side
        return per_head_band
    return None


def per_head_band(b, h, qi, ki):
    """A head-dependent mask (per-head bands, as ALiBi-like schemes give each head its own
    reach): wrong whenever a rank passes its local head index instead of the global one."""
    return (qi - ki).abs() <= 2 * h + 1


def ranges(case: dict, n: int, world: int, key: str):
    """Every rank's global ranges: the case's own uneven lengths, or as shard() cuts."""
    given = case.get(key)
    if given is not None:
        return L.contiguous_ranges(given)
    return L.shard_ranges(n, world, case["layout"])


def run_case(rank: int, world: int, case: dict):
    dtype = DTYPES[case.get("dtype", "float64")]
    q, k, v, lengths, c_out, c_lse = inputs(case)
    qr = ranges(case, q.shape[2], world, "q_lengths")[rank]
    kr = ranges(case, k.shape[2], world, "k_lengths")[rank]
    qs, ks, vs = (L.take(t, rr).to(dtype).requires_grad_(True)
                  for t, rr in ((q, qr), (k, kr), (v, kr)))
    key_mask = None
    if case.get("lengths") is not None:
        key_mask = L.take(torch.arange(k.shape[2]) < lengths[:, None], kr, dim=-1)
    fn = ring_attention if case["fn"] == "ring" else ulysses_attention
    stats: dict = {}
    mask = mask_fn(case)
    if case.get("pad_as") is not None:          # padding given as a tensor mask instead
        keep = key_mask[:, None, None, :]
        mask = keep if case["pad_as"] == "bool" else \
            torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
        key_mask = None
    extra = {"overlap": case["overlap"]} if "overlap" in case else {}
    out, lse = fn(qs, ks, vs, causal=case.get("causal", False), window=case.get("window"),
                  mask=mask, key_mask=key_mask, softcap=case.get("softcap"),
                  layout=case["layout"], return_lse=True, timeout=60, stats=stats, **extra)
    finite = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    loss = ((out.double() * L.take(c_out, qr)).sum()
            + (finite.double() * L.take(c_lse, qr, dim=-1)).sum())
    loss.backward()
    layout = case["layout"] if case.get("q_lengths") is None else "contiguous"
    got = [gather(t.detach().double(), layout=layout, dim=2)
           for t in (out, lse.unsqueeze(-1), qs.grad)]
    got += [gather(t.detach().double(), layout=layout, dim=2) for t in (ks.grad, vs.grad)]
    got[1] = got[1].squeeze(-1)
    return {"tensors": got if rank == 0 else None, "stats": stats,
            "finite": all(bool(torch.isfinite(t).all()) for t in (out, qs.grad, ks.grad, vs.grad))}


def run_cases(rank: int, world: int, cases: list):
    torch.set_num_threads(1)
    return [run_case(rank, world, c) for c in cases]


# ------------------------------------------------------------------------- modules

def modules_setup():
    """An EncoderLayer and a DecoderLayer (float64, no dropout), their inputs and a padding mask
    (torch's convention: True = padding), the same in every process."""
    from attnlab.nn import DecoderLayer, EncoderLayer
    torch.manual_seed(0)
    enc = EncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).double()
    dec = DecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 21, 16, generator=g, dtype=torch.float64)
    tgt = torch.randn(2, 13, 16, generator=g, dtype=torch.float64)
    pad = torch.zeros(2, 21, dtype=torch.bool)
    pad[1, 17:] = True
    return enc, dec, x, tgt, pad


def modules_forward(enc, dec, x, tgt, pad):
    """Encoder (causal, padded) -> decoder (causal, cross-attention over the padded memory),
    and a loss's backward; returns (memory, output)."""
    mem = enc(x, src_key_padding_mask=pad, is_causal=True)
    y = dec(tgt, mem, memory_key_padding_mask=pad, tgt_is_causal=True)
    (y.square().sum() + mem.sum()).backward()
    return mem, y


def parameter_grads(enc, dec) -> dict:
    return dict(list(enc.named_parameters(prefix="enc")) + list(dec.named_parameters(prefix="dec")))


def modules_case(rank: int, world: int, layout: str, strategy: str):
    """The modules on shards; returns the gathered outputs and the parameter gradients summed
    over the ranks."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    enc, dec, x, tgt, pad = modules_setup()
    xs, pads, tgts = (shard(t, layout=layout, dim=1) for t in (x, pad, tgt))
    with sequence_parallel(strategy=strategy, layout=layout, timeout=60):
        mem, y = modules_forward(enc, dec, xs, tgts, pads)
    grads = {}
    for name, p in parameter_grads(enc, dec).items():
        gsum = p.grad.clone()
        dist.all_reduce(gsum)
        grads[name] = gsum
    outs = [gather(t.detach(), layout=layout, dim=1) for t in (mem, y)]
    return {"mem": outs[0], "y": outs[1], "grads": grads} if rank == 0 else None


# ------------------------------------------------------------------------- faults

def fault_case(rank: int, world: int, mode: str):
    """One good ring call, then rank 1 raises / vanishes / passes a different shape / never
    arrives / dies between forward and backward; or a refused call and then a new failure."""
    import os
    import time

    torch.set_num_threads(1)
    q = torch.randn(1, 2, 8, 4)
    ring_attention(q, q, q, timeout=20)
    if mode == "stale":              # every rank refuses a call and goes on; a later failure
        try:                         # must be reported as itself, not as the old error
            x = torch.randn(1, 2, 8, 6) if rank == 1 else q      # refused on every rank
            ring_attention(x, x, x, timeout=20)
        except ValueError:
            pass
        mode = "mask"
    if mode == "never":
        if rank == 1:
            time.sleep(120)          # never reaches the call; spawn must end it
        return float(ring_attention(q, q, q, timeout=3).sum())
    if mode == "between":
        x = q.clone().requires_grad_(True)
        out = ring_attention(x, x, x, causal=True, timeout=20)
        if rank == 1:
            os._exit(9)              # dies after its forward, before the backward
        time.sleep(1.0)              # its connections are known closed when the backward posts
        out.sum().backward()
        return float(x.grad.sum())
    if rank == 1 and mode == "raise":
        raise ValueError("rank 1's model code failed")
    if rank == 1 and mode == "vanish":
        os._exit(7)
    if rank == 1 and mode == "shape":
        q = torch.randn(1, 2, 8, 6)
    if mode == "mask":
        def fn(b, h, qi, ki):
            if rank == 1:
                raise ValueError("mask function failed on rank 1")
            return ki <= qi
        return float(ring_attention(q, q, q, mask=fn, timeout=20).sum())
    return float(ring_attention(q, q, q, timeout=20).sum())


def sleeper(rank: int, world: int):
    import time
    time.sleep(60)


def hybrid_case(rank: int, world: int, cases: list[dict]):
    """Every case on a (ring, ulysses) mesh: the gathered output and the gathered gradients
    of q, k, v against the case's cotangent (float64)."""
    from attnlab.distributed.hybrid import (
        hybrid_attention,
        hybrid_ranges,
        hybrid_shard,
        make_mesh,
    )

    torch.set_num_threads(1)
    results = []
    meshes = {}
    for case in cases:
        split = tuple(case["split"])
        if split not in meshes:
            meshes[split] = make_mesh(*split)
        mesh = meshes[split]
        q, k, v, lengths, c_out, _ = inputs(case)
        n = q.shape[2]
        key_mask = torch.arange(n)[None, :] < lengths[:, None]
        parts = [hybrid_shard(t, mesh).requires_grad_(True) for t in (q, k, v)]

        out = hybrid_attention(*parts, mesh=mesh, causal=case.get("causal", False),
                               window=case.get("window"),
                               key_mask=hybrid_shard(key_mask, mesh, dim=-1)
                               if case.get("lengths") else None, timeout=60)
        out.backward(hybrid_shard(c_out, mesh))
        rr = hybrid_ranges(n, *split)[rank]
        results.append((rr, out.detach(), *(p.grad for p in parts)))
    return results
