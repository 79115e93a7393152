"""What matters, from one backward pass: each head's importance for the loss of a text (or of a
target span), and attribution patching against a corrupted input.

Michel et al. (2019) gate each head's output ``o_h`` by a scalar ``g_h`` (1 in the model) and
read its importance as ``|dL/dg_h| = |sum_t <o_h,t, dL/do_h,t>|``: a first-order estimate of
what removing the head would cost, for every head at once from one forward and one backward,
where ablation (:func:`attnlab.inspect.ablation.head_importance`) runs one forward per head.
With a corrupted input (another text of the same length, the same text without its needle),
``sum_t <o_h,t(clean) - o_h,t(corrupt), dL/do_h,t>`` is attribution patching (Nanda 2023;
Syed et al. 2023): the first-order estimate of what patching the head's clean output into the
corrupted run would restore.

``o_h`` is the head's slice of its attention module's output-projection input (the
concatenated heads, before ``W_O``), read by a forward pre-hook on that projection, so no code
of the model is replaced (the modules :func:`~attnlab.inspect.ablation.attention_modules`
finds). A transformers model runs on attnlab's ``tiled`` backend for the call: forward and
backward in memory linear in the length (no N x N map). The per-position contributions come
back too, so the importance of each stretch of the text (:meth:`HeadImportance.by_band`) costs
nothing more.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn

from attnlab.inspect.ablation import attention_modules


@dataclass
class HeadImportance:
    """Each head's gradient importance.

    Attributes:
        importance: ``(L, H)`` float64, ``|sum_t <o_h,t, dL/do_h,t>|`` (Michel et al.), or with
            a corrupted input the signed attribution-patching estimate
            ``sum_t <o_h,t - o'_h,t, dL/do_h,t>``.
        per_position: ``(L, H, N)`` float64, each position's term of the sum (signed).
        loss: the loss the gradients are of (mean negative log-likelihood of the target
            tokens, nats).
        target: ``(start, end)``: the positions whose tokens the loss predicts.
        patched: whether ``importance`` is attribution patching against a corrupted input.
    """

    importance: torch.Tensor
    per_position: torch.Tensor
    loss: float
    target: tuple[int, int]
    patched: bool = False

    def by_band(self, size: int) -> torch.Tensor:
        """``(L, H, bands)``: the signed sum over positions ``[k * size, (k + 1) * size)``."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size must be an int >= 1 (positions per band), got {size!r}")
        n = self.per_position.shape[-1]
        bands = -(-n // size)
        padded = torch.nn.functional.pad(self.per_position, (0, bands * size - n))
        return padded.reshape(*padded.shape[:2], bands, size).sum(-1)

    def ranking(self) -> list[tuple[int, int]]:
        """Every ``(layer, head)``, the most important first (by ``|importance|``)."""
        flat = self.importance.abs().flatten().argsort(descending=True)
        n_heads = self.importance.shape[1]
        return [divmod(int(i), n_heads) for i in flat]


def _target(target, n: int) -> tuple[int, int]:
    """The positions ``[start, end)`` whose tokens the loss predicts; every token but the
    first by default."""
    if target is None:
        return 1, n
    try:
        start, end = (int(x) for x in target)
    except (TypeError, ValueError):
        raise ValueError(f"target must be (start, end), the positions of the tokens to "
                         f"predict, got {target!r}") from None
    if not 1 <= start < end <= n:
        raise ValueError(f"target must be (start, end) with 1 <= start < end <= {n} (the "
                         f"text's {n} tokens; the first cannot be predicted), got {target!r}")
    return start, end


@contextmanager
def _tiled(model):
    """A transformers model on attnlab's ``tiled`` backend (linear memory, with its
    backward) for the block; any other model as it is."""
    from attnlab.integrations import transformers as ah

    if not ah.is_transformers_model(model):
        yield
        return
    ah.register(["attnlab_tiled"])
    was = model.config._attn_implementation
    model.set_attn_implementation("attnlab_tiled")
    try:
        yield
    finally:
        model.set_attn_implementation(was)


@contextmanager
def _head_outputs(model: nn.Module, keep: list, detach: bool):
    """Every attention module's output-projection input, in module order, appended to
    ``keep`` as the model runs (detached for a corrupted run)."""
    modules = attention_modules(model)
    with ExitStack() as stack:
        for _, proj, _ in modules:
            def pre(mod, args):
                keep.append(args[0].detach() if detach else args[0])
            stack.callback(proj.register_forward_pre_hook(pre).remove)
        yield modules


def _logits(model, input_ids, attention_mask):
    kw = {"attention_mask": attention_mask} if attention_mask is not None else {}
    out = model(input_ids=input_ids, **kw)
    return out.logits if hasattr(out, "logits") else out[0]


def head_gradients(model: nn.Module, input_ids: torch.Tensor, *, target=None,
                   attention_mask: torch.Tensor | None = None,
                   corrupt_ids: torch.Tensor | None = None) -> HeadImportance:
    """Every head's importance for the loss of ``input_ids`` ``(1, N)`` from one forward and one
    backward (see the module docstring).

    Args:
        model: a causal language model returning logits (a transformers model runs on
            attnlab's ``tiled`` backend for the call), whose attention modules have a per-head
            output projection (:func:`~attnlab.inspect.ablation.attention_modules`).
        target: ``(start, end)``: the loss is over the tokens at these positions (the answer
            of a needle question); default every token after the first.
        attention_mask: ``(1, N)``, 0 on padding (left or right): padded positions are not
            in the loss.
        corrupt_ids: ``(1, N)``: a corrupted input of the same length; the importance is then
            attribution patching, ``sum_t <o(clean) - o(corrupt), dL/do>``.
    """
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be one sequence, (1, N), got shape "
                         f"{tuple(input_ids.shape)}")
    n = input_ids.shape[1]
    start, end = _target(target, n)
    if corrupt_ids is not None:
        corrupt_ids = torch.as_tensor(corrupt_ids).reshape(1, -1)
        if corrupt_ids.shape != input_ids.shape:
            raise ValueError(f"corrupt_ids must have the clean input's length ({n} tokens), "
                             f"got {corrupt_ids.shape[1]}; pad or cut the corrupted text to "
                             "the same length")
    modules = attention_modules(model)                  # refuses a model without W_O
    was_training = model.training
    model.eval()
    try:
        with _tiled(model):
            corrupt = []
            if corrupt_ids is not None:
                with torch.no_grad(), _head_outputs(model, corrupt, detach=True):
                    _logits(model, corrupt_ids.to(input_ids.device), attention_mask)
            clean: list[torch.Tensor] = []
            with torch.enable_grad(), _head_outputs(model, clean, detach=False), \
                    _inputs_require_grad(model):
                logits = _logits(model, input_ids, attention_mask)
                loss = _loss(logits, input_ids, start, end, attention_mask)
                if not all(x.requires_grad for x in clean):
                    raise ValueError(f"{type(model).__name__} cannot run backward: its head "
                                     "outputs carry no gradient (an inference-only model?)")
                try:
                    grads = torch.autograd.grad(loss, clean)
                except RuntimeError as err:
                    raise ValueError(f"{type(model).__name__} cannot run backward through its "
                                     f"attention: {err}") from None
    finally:
        model.train(was_training)
    n_heads = max(h for _, _, h in modules)
    per = torch.zeros(len(modules), n_heads, n, dtype=torch.float64)
    for layer, ((_, _, heads), x, g) in enumerate(zip(modules, clean, grads)):
        x = x.detach().double()
        if corrupt:
            x = x - corrupt[layer].double()
        d = x.shape[-1] // heads
        prod = (x * g.double()).reshape(*x.shape[:-1], heads, d).sum(-1)      # (1, N, H)
        per[layer, :heads] = prod[0].T
    total = per.sum(-1)
    return HeadImportance(total if corrupt else total.abs(), per, float(loss.detach()),
                          (start, end),
                          patched=bool(corrupt))


def _loss(logits, ids, start: int, end: int, attention_mask) -> torch.Tensor:
    """Mean negative log-likelihood of the tokens at positions ``[start, end)`` (real ones)."""
    pred = logits[0, start - 1:end - 1].double().log_softmax(-1)
    nll = -pred.gather(-1, ids[0, start:end, None]).squeeze(-1)
    if attention_mask is not None:
        real = attention_mask[0, start:end].bool() & attention_mask[0, start - 1:end - 1].bool()
        if not bool(real.any()):
            raise ValueError("target holds no real token (only padding)")
        return nll[real].mean()
    return nll.mean()


@contextmanager
def _inputs_require_grad(model):
    """The embedding output requires a gradient for the block, so the head outputs do even
    where the weights are frozen (their own gradients are never formed)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is None:
        yield
        return
    handle = emb.register_forward_hook(lambda mod, args, out: out.requires_grad_(True)
                                       if out.is_floating_point() and not out.requires_grad
                                       else out)
    try:
        yield
    finally:
        handle.remove()
