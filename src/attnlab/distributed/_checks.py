"""What every rank checks before a sharded call communicates: its own inputs (one clear
error, posted for the other ranks when a group exists), how a tensor mask becomes the key mask
that travels with its keys, and that every rank passed the same shapes and options."""

from __future__ import annotations

import torch

from attnlab.distributed import layout as L
from attnlab.distributed._comm import Comm

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)



def _shown(t) -> str:
    """A value as an error message shows it: a tensor by dtype and shape."""
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} of shape {tuple(t.shape)}"
    return type(t).__name__

def check_local(q, k, v, key_mask, mask, scale, softcap):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (B, H, N_local, D), got "
                            f"{type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N_local, D): this rank's shard of the "
                             f"sequence, got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}; expected q (B, H, N_q, D), k (B, H_kv, N_k, D), "
                         "v (B, H_kv, N_k, D_v)")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"q has {q.shape[1]} heads, not a multiple of k's {k.shape[1]} "
                         "(grouped-query attention needs H_q = G * H_kv)")
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool \
                or tuple(key_mask.shape) != (k.shape[0], k.shape[2]):
            raise ValueError(
                f"key_mask must be a bool tensor (B, N_k_local) = {(k.shape[0], k.shape[2])} "
                "with True for real keys, got "
                f"{_shown(key_mask)}")
    if mask is not None and not isinstance(mask, torch.Tensor) and not callable(mask):
        raise TypeError(
            "mask must be a mask function fn(b, h, q_idx, kv_idx) of global positions "
            "(attnlab.masks) or a key padding tensor (B, 1, 1, N_k_local), got a "
            + type(mask).__name__)
    for name, val in (("scale", scale), ("softcap", softcap)):
        if val is not None and not (isinstance(val, (int, float)) and val > 0):
            raise ValueError(f"{name} must be a number > 0 or None, got {val!r}")

def key_mask_from(mask: torch.Tensor, batch: int, n_k: int) -> torch.Tensor:
    """A tensor ``mask`` that masks keys only (query dim 1: ``(B | 1, 1, 1, N_k_local)``,
    ``(1, N_k_local)`` or ``(N_k_local,)``; bool True = may attend, or float 0 / -inf) as the
    ``(B, N_k_local)`` bool key mask that travels with its keys. Anything that varies with the
    query cannot be split across ranks and is refused."""
    t = mask
    while t.dim() < 4:
        t = t.unsqueeze(0)
    if (t.dim() > 4 or t.shape[-1] != n_k or t.shape[-2] != 1 or t.shape[-3] != 1
            or t.shape[0] not in (1, batch)):
        raise ValueError(
            f"a tensor mask across ranks may only mask keys: shape (B or 1, 1, 1, N_k_local = "
            f"{n_k}), got {tuple(mask.shape)}; for causal, windows or documents pass causal=, "
            "window= or a mask function of global positions (attnlab.masks)")
    t = t[:, 0, 0, :]
    if t.dtype != torch.bool:
        if bool((torch.isfinite(t) & (t != 0)).any()):
            raise ValueError("a float mask across ranks may only hold 0 and -inf (key padding); "
                             "a learned bias cannot travel with the keys")
        t = t == 0
    return t.expand(batch, n_k).contiguous()


def checked_locally(q, k, v, key_mask, mask, scale, softcap, group=None):
    """This rank's own checks, before any communication; a failure is posted for the other
    ranks (when a process group exists) under the key of the call they are entering, so that
    they end naming this rank. Returns the (mask function, key mask) split of ``mask``."""
    try:
        check_local(q, k, v, key_mask, mask, scale, softcap)
        return masks_of(mask, key_mask, k)
    except (TypeError, ValueError) as error:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            from attnlab.distributed._comm import fault_key, post_fault
            post_fault(dist.get_rank(), error, fault_key(group))
        raise


def masks_of(mask, key_mask, k):
    """Split ``mask`` into (mask function or None, key mask or None)."""
    if isinstance(mask, torch.Tensor):
        km = key_mask_from(mask, k.shape[0], k.shape[2])
        return None, km if key_mask is None else (km & key_mask)
    return mask, key_mask


_FIELDS = ("batch", "query heads", "K/V heads", "head dim", "value dim", "dtype", "causal",
           "window left", "window right", "layout", "key_mask given", "mask given", "scale",
           "softcap")


def agree(comm: Comm, q, k, v, key_mask, mask, causal, band_given, layout, scale, softcap,
          what: str):
    """Gather every rank's shapes and options; raise the same clear error on every rank when
    they differ. Returns every rank's (n_q, n_k)."""
    def code(x):
        return -1 if x is None else int(round(float(x) * 1e6)) if not isinstance(x, int) else x
    left, right = band_given if band_given is not None else (None, None)
    mine = [q.shape[0], q.shape[1], k.shape[1], q.shape[-1], v.shape[-1],
            DTYPES.index(q.dtype), int(bool(causal)), code(left), code(right),
            L.LAYOUTS.index(layout), int(key_mask is not None), int(mask is not None),
            code(scale), code(softcap)]
    comm.step = "checking that every rank passed the same shapes"
    rows = comm.all_gather_ints(mine + [q.shape[2], k.shape[2]])
    for r, row in enumerate(rows):
        for name, a, b in zip(_FIELDS, row, rows[0]):
            if a != b:
                raise ValueError(f"{what}: rank {r} has {name} = {_show(name, a)} where rank 0 "
                                 f"has {_show(name, b)}; every rank must call with the same "
                                 "batch, heads, head dims, dtype and options (only the sequence "
                                 "length may differ)")
    return [(row[-2], row[-1]) for row in rows]


def _show(name, x):
    if name == "dtype":
        return str(DTYPES[x])
    if name == "layout":
        return repr(L.LAYOUTS[x])
    return "None" if x == -1 and name.startswith(("window", "scale", "softcap")) else str(x)
