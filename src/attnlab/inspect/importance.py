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
backward in memory linear in the length (no N x N map). For the memory to stay near the
forward's, each decoder layer is checkpointed for the call (only its input is kept; the
backward recomputes one layer at a time, torch.utils.checkpoint) and the loss is computed over
chunks of positions, so the N x vocabulary logits never exist at once. The per-position
contributions come back too, so the importance of each stretch of the text
(:meth:`HeadImportance.by_band`) costs nothing more.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from attnlab.core.engine.eager.loop import collect_relevance
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
        relevance: ``(L, H, N)`` float64 with ``relevance=True``: the relevance each key
            receives, ``sum_i (P_ij dP_ij)+`` over the queries (``dP`` the gradient of the
            weights), formed tile by tile in the backward; else None.
    """

    importance: torch.Tensor
    per_position: torch.Tensor
    loss: float
    target: tuple[int, int]
    patched: bool = False
    relevance: torch.Tensor | None = None

    def token_relevance(self) -> torch.Tensor:
        """``(N,)``: each token's relevance summed over every layer and head (``relevance``,
        Chefer et al. 2021's ``sum_i (P_ij dP_ij)+``); a ValueError where it was not asked."""
        if self.relevance is None:
            raise ValueError("no token relevance: call head_gradients(..., relevance=True)")
        return self.relevance.sum((0, 1))

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
def _head_outputs(model: nn.Module, keep: list):
    """Every attention module's output-projection input, detached, in module order, appended
    to ``keep`` as the model runs (the corrupted run's head outputs)."""
    modules = attention_modules(model)
    with ExitStack() as stack:
        for _, proj, _ in modules:
            def pre(mod, args):
                keep.append(args[0].detach())
            stack.callback(proj.register_forward_pre_hook(pre).remove)
        yield modules


def _logits(model, input_ids, attention_mask):
    from attnlab.inspect.collect import _takes_cache

    kw = {"attention_mask": attention_mask} if attention_mask is not None else {}
    if _takes_cache(model):
        kw["use_cache"] = False         # a checkpointed layer's recomputation would append again
    out = model(input_ids=input_ids, **kw)
    return out.logits if hasattr(out, "logits") else out[0]


def can_backward(model: nn.Module) -> None:
    """Refuse, before any work, what cannot run the backward the importance needs: a call
    inside ``torch.inference_mode()``, or a model whose weights were made there (inference
    tensors cannot join autograd)."""
    if torch.is_inference_mode_enabled():
        raise ValueError("head importance needs a backward pass, and this call runs inside "
                         "torch.inference_mode(); call it outside (torch.no_grad() around it "
                         "is fine)")
    frozen = next((name for name, p in model.named_parameters() if p.is_inference()), None)
    if frozen is not None:
        raise ValueError(f"head importance needs a backward pass, and the model's weights "
                         f"were made under torch.inference_mode() ({frozen} is an inference "
                         f"tensor); load the model outside inference_mode, or clone its "
                         f"parameters")


def head_gradients(model: nn.Module, input_ids: torch.Tensor, *, target=None,
                   attention_mask: torch.Tensor | None = None,
                   corrupt_ids: torch.Tensor | None = None,
                   relevance: bool = False) -> HeadImportance:
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
        relevance: also each key's relevance per head (Chefer et al. 2021, summed over the
            queries), from the eager tile loop's backward (the compiled one does not form
            ``P dP``; slower).
    """
    can_backward(model)
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
    if relevance:
        from attnlab.integrations.transformers import is_transformers_model

        if not is_transformers_model(model):
            raise ValueError(f"relevance=True needs a transformers model (its attention runs "
                             f"on attnlab's tiled backend); {type(model).__name__} is not one")
    was_training = model.training
    model.eval()
    try:
        with _tiled(model):
            corrupt: list[torch.Tensor] = []
            if corrupt_ids is not None:
                with torch.no_grad(), _head_outputs(model, corrupt):
                    _logits(model, corrupt_ids.to(input_ids.device), attention_mask)
            with torch.enable_grad(), _gated(model, modules, n, corrupt) as gates, \
                    _checkpointed(model, modules) as lean, \
                    (collect_relevance() if relevance else nullcontext()) as found, \
                    _embedded(model, relevance) as embedded:
                out = _logits(model, input_ids, attention_mask)
                if lean is not None:          # the last hidden states: the loss by chunks
                    loss = _chunked_loss(lean, out, input_ids, start, end, attention_mask)
                else:
                    loss = _loss(out, input_ids, start, end, attention_mask)
                try:
                    # with relevance, the embeddings too: the backward then runs through every
                    # layer's attention (the gates alone do not need the first layer's)
                    grads = torch.autograd.grad(loss, [*gates, *embedded])[:len(gates)]
                except RuntimeError as err:
                    raise ValueError(f"{type(model).__name__} cannot run backward through its "
                                     f"attention: {err}") from None
    finally:
        model.train(was_training)
    n_heads = max(h for _, _, h in modules)
    per = torch.zeros(len(modules), n_heads, n, dtype=torch.float64)
    for layer, ((_, _, heads), g) in enumerate(zip(modules, grads)):
        per[layer, :heads] = g[0].double().T                              # (H, N)
    total = per.sum(-1)
    rel = None
    if relevance:
        if len(found) != len(modules):
            raise ValueError(f"{type(model).__name__}'s attention did not run on attnlab's "
                             f"tiled backend ({len(found)} of {len(modules)} layers gave a "
                             "relevance): relevance=True needs a transformers model")
        rel = torch.zeros(len(modules), n_heads, n, dtype=torch.float64)
        for layer, r in enumerate(reversed(found)):         # the backward runs last layer first
            rel[layer, :r.shape[0]] = r.cpu()
    return HeadImportance(total if corrupt else total.abs(), per, float(loss.detach()),
                          (start, end), patched=bool(corrupt), relevance=rel)


@contextmanager
def _gated(model: nn.Module, modules, n: int, corrupt: list):
    """A gate of ones ``(1, N, H)`` on every head's output at every position, for the block:
    the projection's input ``o`` becomes ``o * g`` (or ``o' + g (o - o')`` against the
    corrupted run's ``o'``), the same numbers, so ``dL/dg`` is each position's
    ``<o, dL/do>`` (or ``<o - o', dL/do>``) with nothing of ``o`` or its gradient kept: under
    checkpointing the product is recomputed with its layer. Yields the gates."""
    gates = []
    with ExitStack() as stack:
        for layer, (_, proj, heads) in enumerate(modules):
            weight = next(proj.parameters(), None)
            gate = torch.ones(1, n, heads, requires_grad=True,
                              dtype=weight.dtype if weight is not None else torch.float32,
                              device=weight.device if weight is not None else None)
            gates.append(gate)

            def pre(mod, args, gate=gate, heads=heads, layer=layer):
                x = args[0]
                shaped = x.reshape(*x.shape[:-1], heads, -1)
                g = gate.to(x.dtype)[..., None]
                if corrupt:
                    base = corrupt[layer].to(x.dtype).reshape(shaped.shape)
                    shaped = base + g * (shaped - base)
                else:
                    shaped = shaped * g
                return (shaped.reshape(x.shape), *args[1:])
            stack.callback(proj.register_forward_pre_hook(pre).remove)
        yield gates


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


CHUNK = 256        # positions per chunk of the loss: 256 x vocabulary logits at a time


def _decoder_layers(model, modules) -> list[nn.Module] | None:
    """The model's decoder layers, one per attention module in the same order (the
    ``nn.ModuleList`` whose i-th entry holds the i-th attention module), or None."""
    attn = [m for m, _, _ in modules]
    for block in model.modules():
        if isinstance(block, nn.ModuleList) and len(block) == len(attn) and all(
                any(x is a for x in layer.modules()) for layer, a in zip(block, attn)):
            return list(block)
    return None


@contextmanager
def _checkpointed(model, modules):
    """For the block, each decoder layer of a transformers causal language model is
    checkpointed and its output head returns the last hidden states; yields that head (the
    loss is then taken by chunks, :func:`_chunked_loss`), or None where the model is not of
    that kind (its forward is left as it is). The instances' ``forward`` attributes are set
    and put back as they were (a hook's own, or none): the classes are untouched."""
    from attnlab.integrations.transformers import is_transformers_model

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    layers = _decoder_layers(model, modules)
    config = getattr(model, "config", None)
    plain_head = (isinstance(head, nn.Linear) and not getattr(config, "final_logit_softcapping",
                                                              None))
    if not (is_transformers_model(model) and layers and plain_head):
        yield None
        return
    wrapped = []                    # (module, its own forward attribute before, or None)
    try:
        for layer in layers:
            orig = layer.forward

            def forward(*args, _orig=orig, **kwargs):
                return checkpoint(_orig, *args, use_reentrant=False, **kwargs)
            wrapped.append((layer, layer.__dict__.get("forward")))
            layer.forward = forward
        wrapped.append((head, head.__dict__.get("forward")))
        head.forward = lambda x: x                     # the model returns the hidden states
        yield head
    finally:
        for m, before in reversed(wrapped):            # an accelerate hook's forward too
            if before is None:
                del m.forward
            else:
                m.forward = before


def _chunked_loss(head: nn.Linear, hidden, ids, start: int, end: int,
                  attention_mask) -> torch.Tensor:
    """:func:`_loss` with the logits made ``CHUNK`` positions at a time and recomputed in the
    backward (checkpointed), from the last hidden states ``(1, N, d)``."""
    real = torch.ones(end - start, dtype=torch.bool, device=ids.device)
    if attention_mask is not None:
        real = attention_mask[0, start:end].bool() & attention_mask[0, start - 1:end - 1].bool()
        if not bool(real.any()):
            raise ValueError("target holds no real token (only padding)")
    weight, bias = head.weight, head.bias

    def nll(h, tgt, keep):
        logits = nn.functional.linear(h, weight, bias)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(-1)
        return -(logits.gather(-1, tgt[:, None]).squeeze(-1).double() * keep).sum()

    total = hidden.new_zeros((), dtype=torch.float64)
    for a in range(start, end, CHUNK):
        b = min(end, a + CHUNK)
        total = total + checkpoint(nll, hidden[0, a - 1:b - 1], ids[0, a:b],
                                   real[a - start:b - start].double(), use_reentrant=False)
    return total / real.sum()


@contextmanager
def _embedded(model, wanted: bool):
    """With ``wanted``, the model's input embeddings, made to require a gradient and collected
    as the forward makes them (yields the list); else an empty list."""
    found: list = []
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not wanted or emb is None:
        yield found
        return

    def hook(mod, args, out):
        if len(found) < 1 and out.is_floating_point():
            out = out if out.requires_grad else out.detach().requires_grad_(True)
            found.append(out)
            return out
        return None
    handle = emb.register_forward_hook(hook)
    try:
        yield found
    finally:
        handle.remove()
