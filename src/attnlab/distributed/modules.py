"""Run attnlab's modules with the sequence sharded: ``SequenceParallel(model)``.

Every token-wise part of a transformer (projections, feed-forward, LayerNorm, residuals) works on
a shard of the sequence unchanged; only attention needs the other shards. While a
:class:`SequenceParallel` module (or the :func:`sequence_parallel` block) runs, each
``attnlab.attention`` call made by attnlab's modules is routed to
:func:`~attnlab.distributed.ring_attention` or :func:`~attnlab.distributed.ulysses_attention`
with the local q, k, v. What the module passes is translated: ``is_causal`` / ``causal`` become
causal on the whole sequence, a key padding mask ``(B, N_local)`` travels with its keys.

Positions are the caller's: add position encodings for the global positions of the local rows
(:func:`attnlab.distributed.local_positions`). Gradients of the parameters are this rank's share;
sum them over the ranks (``torch.distributed.all_reduce``) before the optimizer step.
"""

from __future__ import annotations

import contextlib
import math

from torch import nn

from attnlab.core.api import dispatch_to
from attnlab.distributed.ring import ring_attention
from attnlab.distributed.ulysses import ulysses_attention

STRATEGIES = ("ring", "ulysses", "auto")


def choose_strategy(n_heads: int, n_kv_heads: int, world_size: int, *, window=None,
                    n_local: int | None = None) -> str:
    """The rule of docs/distributed.md: ``"ulysses"`` when the (K/V) heads split evenly over
    the ranks, else ``"ring"``.

    Measured on one 2-core machine (benchmarks/bench_distributed.py), all-to-all was as fast or
    faster in every configuration (1.0-1.3x dense causal, 2x with a 256-token window, where the
    ring's tile backward computes more than the band). With uneven heads the busiest all-to-all
    rank holds ceil(H / P) heads, which separate devices would wait for; the ring's work does
    not depend on the head count. ``window`` and ``n_local`` are accepted for a future rule
    that weighs the ring's skipped steps (it sends less with a narrow window)."""
    heads = n_kv_heads if n_kv_heads >= world_size else n_heads
    if heads % world_size:
        return "ring"
    return "ulysses"


class _Router:
    splits_sequence = True          # modules ask (attnlab.core.api.current_route)

    def __init__(self, group, strategy, layout, backend, timeout):
        self.group, self.strategy, self.layout = group, strategy, layout
        self.backend, self.timeout = backend, timeout

    def __call__(self, q, k, v, options):
        bad = [name for name in ("score_mod", "sinks")
               if options[name] is not None]
        if options["dropout_p"]:
            bad.append("dropout_p")
        if options["return_weights"]:
            raise ValueError("under sequence parallelism attention weights are never gathered: "
                             "call the module with need_weights=False (return_weights=False)")
        if bad:
            raise ValueError(f"sequence-parallel attention does not take {', '.join(bad)}; "
                             "dropout: put the model in eval() or set dropout=0.0")
        if q.dim() != 4:
            raise ValueError(f"sequence-parallel attention takes (B, H, N_local, D), got q of "
                             f"shape {tuple(q.shape)}")
        mask = options["mask"]                     # a key padding tensor becomes key_mask
        scale = options["scale"]
        if options["temperature"] != 1.0:
            scale = (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])) \
                / options["temperature"]
        strategy = self.strategy
        if strategy == "auto":
            import torch.distributed as dist
            strategy = choose_strategy(q.shape[1], k.shape[1], dist.get_world_size(self.group),
                                       window=options["window"], n_local=k.shape[2])
        fn = ring_attention if strategy == "ring" else ulysses_attention
        backend = self.backend if self.backend != "auto" else options["backend"] or "auto"
        if backend == "auto" and strategy == "ring":
            backend = "tiled"                      # the ring's default: memory of one tile
        res = fn(q, k, v, group=self.group, causal=options["causal"], window=options["window"],
                 mask=mask, scale=scale, softcap=options["softcap"],
                 layout=self.layout, backend=backend, timeout=self.timeout,
                 return_lse=options["return_lse"])
        if options["return_lse"]:
            from attnlab.core.spec import AttentionOutput
            return AttentionOutput(res[0], None, res[1])
        return res


def _refuse_extra_keys(module: nn.Module) -> None:
    """add_bias_kv / add_zero_attn append one key to the whole sequence; sharded, every rank
    would append its own. Refused by name when the model is wrapped."""
    from attnlab.nn.multihead import MultiheadAttention, sharded_extra_key_error
    for name, m in module.named_modules():
        if isinstance(m, MultiheadAttention) and (m.bias_k is not None or m.add_zero_attn):
            raise ValueError(sharded_extra_key_error(m, name or "the wrapped module"))
        if isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"{name or 'the wrapped module'} is torch.nn.MultiheadAttention, "
                            "which does not call attnlab.attention and would attend over this "
                            "rank's shard only; convert it with "
                            "attnlab.nn.MultiheadAttention.from_torch(module)")


def _check(strategy, layout):
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    from attnlab.distributed.layout import check_layout
    check_layout(layout)


@contextlib.contextmanager
def sequence_parallel(*, group=None, strategy: str = "ring", layout: str = "zigzag",
                      backend: str = "auto", timeout: float | None = None):
    """Inside the block, attnlab's attention calls run sharded over ``group``."""
    _check(strategy, layout)
    with dispatch_to(_Router(group, strategy, layout, backend, timeout)):
        yield


class SequenceParallel(nn.Module):
    """Wrap a module (``MultiheadAttention``, ``EncoderLayer``, ``DecoderLayer``, a whole model)
    so that its forward sees this rank's shard of the sequence and attends over all of it.

    Args:
        module: the module; its parameters stay its own (``state_dict`` keys gain ``module.``).
        group: the process group (default: the world).
        strategy: ``"ring"``, ``"ulysses"`` or ``"auto"`` (:func:`choose_strategy`).
        layout: how the sequence was cut, ``"zigzag"`` (default) or ``"contiguous"``.
        backend: the single-process backend of each block.
        timeout: seconds any one wait may take.

    Example:
        >>> layer = SequenceParallel(EncoderLayer(64, 4), layout="zigzag")   # doctest: +SKIP
        >>> y = layer(shard(x, layout="zigzag", dim=1), is_causal=True)      # doctest: +SKIP
    """

    def __init__(self, module: nn.Module, *, group=None, strategy: str = "ring",
                 layout: str = "zigzag", backend: str = "auto", timeout: float | None = None):
        super().__init__()
        _check(strategy, layout)
        _refuse_extra_keys(module)
        self.module = module
        self.group, self.strategy, self.layout = group, strategy, layout
        self.backend, self.timeout = backend, timeout

    def forward(self, *args, **kwargs):
        """The wrapped model's forward, with its attention calls sharded across the group."""
        with sequence_parallel(group=self.group, strategy=self.strategy, layout=self.layout,
                               backend=self.backend, timeout=self.timeout):
            return self.module(*args, **kwargs)
