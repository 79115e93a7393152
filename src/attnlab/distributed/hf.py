"""Hugging Face transformers models trained with their sequence sharded across processes.

    from attnlab.distributed.hf import ShardedModel

    sp = ShardedModel(model)                          # every rank: the same model, same weights
    batch = sp.shard(input_ids=ids, attention_mask=am, labels=ids)   # the whole batch in
    loss = sp.loss(sp(**batch).logits, batch)         # the unsharded loss's value
    loss.backward()
    sp.sync_gradients()                               # every rank: the unsharded gradient

What each piece does:

* :meth:`ShardedModel.shard` cuts every sequence tensor of the batch into this rank's shard in
  the zig-zag layout (:mod:`attnlab.distributed.layout`: under a causal mask each rank gets about
  the same work) and adds ``position_ids``: the global positions of the rows it holds, so RoPE
  and learned position embeddings see what they would see unsharded. Labels are shifted on the
  whole sequence before the cut (a causal LM predicts token t + 1 at position t), so the label
  of a shard's last row is the first token of the next chunk, held by another rank, with no
  message. Positions whose label is -100 (and the last one) are ignored, as transformers'
  ``ForCausalLMLoss`` ignores them, and so are predictions made at padding positions (with
  left padding transformers would score the first real token from a padding position, whose
  attention output depends only on how a backend treats a row with no key to attend to).
* Every attention call of the model goes through the implementation ``attnlab_ring`` (K/V
  shards travel the ring, partials merged by log-sum-exp), ``attnlab_ulysses`` (two all-to-alls
  trade the sequence split for a head split), ``attnlab_sharded`` (the rule of
  :func:`~attnlab.distributed.choose_strategy`: all-to-all when the heads split evenly over the
  ranks, else the ring) or ``attnlab_hybrid`` (all-to-all inside groups, the ring across them,
  :mod:`attnlab.distributed.hybrid`), registered with transformers' ``AttentionInterface``.
  The padding of the batch reaches them as the key mask of each rank's own rows; causality,
  sliding windows
  (Mistral, Gemma 2's alternating layers), softcapping (Gemma 2) and grouped-query K/V (fewer
  K/V heads than ranks included, on the ring) are passed on; gpt-oss's per-head sinks scale each
  row once after the merge (:func:`with_sinks`). Attention dropout while training, additive
  position biases (T5) and packed sequences are refused by name.
* :meth:`ShardedModel.loss` is the token-weighted mean over all ranks: this rank's summed cross
  entropy divided by the number of labelled tokens of every rank. Its value is the unsharded
  loss; its gradient is this rank's share, so that :meth:`ShardedModel.sync_gradients` (a sum
  over ranks) gives every rank the unsharded gradient.
* ``generate()`` is refused: a KV cache of a sharded prefill would hold only this rank's
  keys. Generate with the unsharded model (``sp.model`` after :meth:`ShardedModel.close`).

Every wait has a deadline (``timeout``); a rank that fails or leaves ends the others with
:class:`~attnlab.distributed.RankFailure` naming it.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.core.softmax import add_sink
from attnlab.distributed.hybrid import choose_split, hybrid_attention, hybrid_ranges, make_mesh
from attnlab.distributed.layout import check_layout, shard_ranges, take
from attnlab.distributed.modules import choose_strategy
from attnlab.distributed.ring import ring_attention
from attnlab.distributed.ulysses import ulysses_attention
from attnlab.integrations.calls import causal_and_window
from attnlab.integrations.registry import add_names, config_field, remove_names

NAMES = {"attnlab_ring": "ring", "attnlab_ulysses": "ulysses", "attnlab_sharded": "auto",
         "attnlab_hybrid": "hybrid"}
IGNORE = -100                                   # transformers' ignore_index for labels
# batch entries cut along the sequence (dim 1); anything else passes through whole
_SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels", "position_ids",
                  "inputs_embeds")


@dataclass
class _Call:
    """What the attention calls of one sharded forward need besides their tensors."""

    group: object
    layout: str
    strategy: str
    key_mask: torch.Tensor | None          # (B, N_local) bool, True for real tokens
    timeout: float | None
    world: int
    mesh: object = None                    # the (ring, ulysses) mesh of the hybrid


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("attnlab_sharded_call",
                                                                    default=None)


def _refuse(module, name: str, dropout: float, position_bias, kwargs) -> None:
    """A ValueError naming what the model asked for that a sharded call cannot do."""
    model = type(module).__name__
    if dropout and module.training:
        field = config_field(getattr(module, "config", None), "attention dropout") \
            or "attention_dropout"
        raise ValueError(f"{name}: {model} has attention dropout {dropout:g} in training; the "
                         f"sharded attention has none. Set the config's {field} to 0 "
                         f"({field}=0.0) or call model.eval()")
    if position_bias is not None:
        raise ValueError(f"{name}: {model} adds a position bias (T5) to the scores; a sharded "
                         "call cannot see the bias of other ranks' keys. Run it unsharded")
    packed = [k for k in ("cu_seq_lens_q", "cu_seq_lens_k") if kwargs.get(k) is not None]
    if packed:
        raise ValueError(f"{name}: packed sequences ({', '.join(packed)}) cannot be sharded; "
                         "pass a padded batch with an attention_mask")
    if kwargs.get("output_attentions"):
        raise ValueError(f"{name}: output_attentions=True would need the whole N x N map on "
                         "every rank; inspect the unsharded model instead")


def make_sharded_attention(strategy: str):
    """transformers' attention-interface function for one sharded ``strategy``."""
    name = next(n for n, s in NAMES.items() if s == strategy)

    def attnlab_sharded_attention(module, query, key, value, attention_mask, scaling=None,
                                  dropout=0.0, is_causal=None, softcap=None,
                                  sliding_window=None, position_bias=None, s_aux=None,
                                  sinks=None, **kwargs):
        call = _CALL.get()
        if call is None:
            raise RuntimeError(f"attention implementation {name!r} runs inside a "
                               "ShardedModel's forward (sp(**batch)); call the model through "
                               "attnlab.distributed.hf.ShardedModel")
        _refuse(module, name, dropout, position_bias, kwargs)
        sink = s_aux if s_aux is not None else sinks
        # padding travels as each rank's key mask, never as a mask tensor
        causal, window = causal_and_window(module, is_causal, sliding_window, query.shape[2])
        chosen = strategy
        if chosen == "auto":
            chosen = choose_strategy(query.shape[1], key.shape[1], call.world)
        if chosen == "hybrid":
            out, lse = hybrid_attention(query, key, value, mesh=call.mesh, causal=causal,
                                        window=window, key_mask=call.key_mask, scale=scaling,
                                        softcap=softcap, timeout=call.timeout,
                                        return_lse=True)
        else:
            fn = ring_attention if chosen == "ring" else ulysses_attention
            out, lse = fn(query, key, value, group=call.group,
                          causal=causal and window is None, window=window,
                          key_mask=call.key_mask, scale=scaling, softcap=softcap,
                          layout=call.layout, timeout=call.timeout, return_lse=True)
        if sink is not None:
            out = with_sinks(out, lse, sink)
        return out.transpose(1, 2).contiguous(), None

    attnlab_sharded_attention.__name__ = f"attnlab_{strategy}_sharded_attention"
    return attnlab_sharded_attention


def with_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Attention with a per-head sink logit (gpt-oss) from attention without one, ``out (B, H,
    N, D)`` and ``lse (B, H, N)``: core's merge with one more key of logit ``sink`` and value 0
    (:func:`attnlab.core.softmax.add_sink`), applied once after the ranks' partials are
    merged."""
    merged, _ = add_sink(out, lse, sinks.to(lse.dtype)[None, :, None])
    return merged.to(out.dtype)


def _no_mask(*args, **kwargs):
    """The mask function of the sharded names: none (padding travels as each rank's key mask,
    causality and windows as flags)."""
    return None


_no_mask.__name__ = "attnlab_sharded_no_mask"
_REGISTERED: dict[str, tuple] = {}


def register() -> list[str]:
    """Register :data:`NAMES` with transformers' attention and mask interfaces through the
    integration's one registrar (idempotent; transformers' own names are untouched)."""
    add_names({name: (lambda strategy=strategy: (make_sharded_attention(strategy), _no_mask))
               for name, strategy in NAMES.items()}, _REGISTERED)
    return list(_REGISTERED)


def unregister() -> None:
    """Remove the names :func:`register` added."""
    remove_names(_REGISTERED)


class ShardedModel:
    """A transformers model whose attention runs sharded over ``group`` (see the module
    docstring). Construction switches the model to ``attnlab_<strategy>``; :meth:`close` (or
    leaving a ``with`` block) switches it back.

    Args:
        model: a transformers ``PreTrainedModel``, the same weights on every rank.
        group: the process group (default: the world).
        strategy: ``"ring"``, ``"ulysses"``, ``"auto"`` (per call: all-to-all when the heads
            split evenly over the ranks, else the ring) or ``"hybrid"`` (all-to-all inside
            groups, the ring across them: :mod:`attnlab.distributed.hybrid`; the world only).
        layout: ``"zigzag"`` (balanced under a causal mask) or ``"contiguous"``; the hybrid
            has its own (zig-zag over groups, contiguous inside each).
        mesh: the hybrid's ``(ring, ulysses)`` mesh (:func:`~attnlab.distributed.hybrid.
            make_mesh`); default the split :func:`~attnlab.distributed.hybrid.choose_split`
            picks for the model's heads.
        timeout: seconds any one wait may take before :class:`RankFailure`.
    """

    def __init__(self, model, *, group=None, strategy: str = "ring", layout: str = "zigzag",
                 timeout: float | None = None, mesh=None):
        import torch.distributed as dist

        if strategy not in ("ring", "ulysses", "auto", "hybrid"):
            raise ValueError(f"strategy must be one of ring, ulysses, auto, hybrid, got "
                             f"{strategy!r}")
        if strategy == "hybrid" and group is not None:
            raise ValueError("strategy='hybrid' spans the world (its mesh); pass group=None")
        check_layout(layout)
        if not dist.is_initialized():
            raise RuntimeError("ShardedModel needs a process group: run under torchrun (and "
                               "call torch.distributed.init_process_group) or "
                               "attnlab.distributed.spawn")
        register()
        self.model, self.group, self.layout, self.timeout = model, group, layout, timeout
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.name = {"ring": "attnlab_ring", "ulysses": "attnlab_ulysses",
                     "auto": "attnlab_sharded", "hybrid": "attnlab_hybrid"}[strategy]
        self.strategy = strategy
        if strategy == "hybrid" and mesh is None:
            cfg = model.config
            heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
            kv = getattr(cfg, "num_key_value_heads", None) or heads
            mesh = make_mesh(*choose_split(heads, kv, self.world))
        self.mesh = mesh
        self._previous = model.config._attn_implementation
        model.set_attn_implementation(self.name)

    # ---- the batch ------------------------------------------------------------------------

    def shard(self, *, input_ids=None, attention_mask=None, labels=None, shift_labels=None,
              **batch) -> dict:
        """This rank's part of a batch every rank holds whole: each sequence tensor cut in the
        layout, ``position_ids`` the global positions of its rows, and ``labels`` shifted on
        the whole sequence first (``shift_labels=False`` for a masked LM, whose labels sit at
        their own position; the default shifts for causal models)."""
        whole = input_ids if input_ids is not None else batch.get("inputs_embeds")
        if whole is None:
            raise ValueError("shard() needs input_ids or inputs_embeds, the whole sequences")
        b, n = whole.shape[:2]
        if n < 2 * self.world and self.layout == "zigzag":
            raise ValueError(f"the sequence has {n} tokens; the zig-zag layout over "
                             f"{self.world} ranks needs at least {2 * self.world}")
        out = {}
        if input_ids is not None:
            out["input_ids"] = input_ids
        if attention_mask is not None:
            if attention_mask.shape != (b, n):
                raise ValueError(f"attention_mask must be (batch, length) = {(b, n)}, got "
                                 f"{tuple(attention_mask.shape)}")
            out["attention_mask"] = attention_mask
        if labels is not None:
            if shift_labels is None:
                shift_labels = not self._is_encoder()
            if shift_labels:
                labels = torch.cat([labels[:, 1:], labels.new_full((b, 1), IGNORE)], dim=1)
            if attention_mask is not None:
                # a padding position predicts nothing (after left padding, the first real
                # token has no real context to be predicted from), and nothing predicts
                # padding: after the shift, the last real token of a right-padded row would
                # otherwise learn the pad id (labels=input_ids, as the recipe writes it)
                dead = attention_mask == 0
                if shift_labels:
                    dead = dead | torch.cat([dead[:, 1:], dead.new_ones((b, 1))], dim=1)
                labels = labels.masked_fill(dead, IGNORE)
            out["labels"] = labels
        if "position_ids" not in batch:
            pos = torch.arange(n, device=whole.device).expand(b, n)
            batch["position_ids"] = pos
        out.update(batch)
        mine = self.ranges(n)
        for key, value in list(out.items()):
            if key in _SEQUENCE_KEYS and isinstance(value, torch.Tensor):
                out[key] = take(value, mine, dim=1).contiguous()
        # whether any rank holds padding: every rank must then pass a key mask (the ring
        # checks that all ranks call with the same options)
        out["_padded"] = attention_mask is not None and not bool(attention_mask.all())
        return out

    def ranges(self, n_total: int) -> list[tuple[int, int]]:
        """The global ranges of the rows this rank holds of a sequence of ``n_total``."""
        if self.strategy == "hybrid":
            ring, ulysses = self.mesh.shape
            return hybrid_ranges(n_total, ring, ulysses)[self.rank]
        return shard_ranges(n_total, self.world, self.layout)[self.rank]

    def _is_encoder(self) -> bool:
        return not getattr(self.model.config, "is_decoder", False) and \
            getattr(self.model.config, "model_type", "") in ("bert", "roberta", "distilbert",
                                                             "electra", "deberta-v2")

    # ---- forward, loss, gradients ---------------------------------------------------------

    def __call__(self, **batch):
        """The model's forward on this rank's shard (labels are not passed: :meth:`loss`
        reduces over ranks)."""
        padded = batch.get("_padded")
        batch = {k: v for k, v in batch.items() if k not in ("labels", "_padded")}
        mask = batch.pop("attention_mask", None)
        if padded is None:                  # a batch not cut by shard(): ask every rank
            import torch.distributed as dist

            flag = torch.tensor([0 if mask is None else int(not bool(mask.all()))])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
            padded = bool(flag.item())
        key_mask = mask.bool() if padded else None
        token = _CALL.set(_Call(self.group, self.layout, self.strategy, key_mask,
                                self.timeout, self.world, self.mesh))
        try:
            return self.model(**batch, use_cache=False)
        finally:
            _CALL.reset(token)

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        """Cross entropy averaged over every labelled token of every rank. The value is the
        unsharded loss; the gradient is this rank's share (sum with :meth:`sync_gradients`)."""
        import torch.distributed as dist

        labels = batch["labels"]
        # in the logits' precision, at least float32 (transformers upcasts half precision)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        local = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                ignore_index=IGNORE, reduction="sum")
        totals = torch.stack([local.detach(), (labels != IGNORE).sum().to(local.dtype)])
        dist.all_reduce(totals, group=self.group)
        count = totals[1].clamp_min(1)
        return local / count + (totals[0] - local.detach()) / count

    def sync_gradients(self) -> None:
        """Sum every parameter's gradient over the ranks (each rank computed its share)."""
        import torch.distributed as dist

        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)
        i = 0
        for g in grads:
            g.copy_(flat[i:i + g.numel()].view_as(g))
            i += g.numel()

    def generate(self, *args, **kwargs):
        """Refused: a sharded prefill's KV cache holds only this rank's keys."""
        raise NotImplementedError("generate() after a sharded prefill is not supported: each "
                                  "rank's KV cache would hold only its own keys. Call "
                                  "sp.close() and generate with sp.model on one process")

    def close(self) -> None:
        """Switch the model back to the attention implementation it had."""
        self.model.set_attn_implementation(self._previous)

    def __enter__(self) -> "ShardedModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
