"""Attribution beyond raw attention: rollout, flow, gradient-weighted attention.

Maps are ``(L, H, n, n)`` for one sequence, rows = queries. Every result is ``(n, n)``:
entry ``[i, j]`` is how much input token j contributes to output position i.
"""

from __future__ import annotations

import torch

FLOW_MAX_TOKENS = 32


def _with_residual(a: torch.Tensor, residual: float) -> torch.Tensor:
    """``(1 − r)·A + r·I`` with rows renormalized: the residual connection carries the token
    itself to the next layer (Abnar & Zuidema 2020, section 3)."""
    n = a.shape[-1]
    mixed = (1 - residual) * a + residual * torch.eye(n, dtype=a.dtype)
    return mixed / mixed.sum(-1, keepdim=True).clamp_min(1e-12)


def rollout(maps: torch.Tensor, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): ``R = Â_L ⋯ Â_1`` with
    ``Â_l = 0.5·mean_h A_l + 0.5·I`` (rows renormalized)."""
    r = torch.eye(maps.shape[-1], dtype=maps.dtype)
    for layer in maps:
        r = _with_residual(layer.mean(0), residual) @ r
    return r


def flow(maps: torch.Tensor, residual: float = 0.5) -> torch.Tensor:
    """Attention flow (Abnar & Zuidema 2020): the maximum flow from input token j to output
    position i through the layered graph whose edge capacities are ``Â_l``.

    Each row is then normalized to sum to 1, as rollout's rows do: a single source-sink
    flow is bounded by 1 and most pairs come close to it, so raw values hardly discriminate.
    One max-flow problem per pair, so limited to ``FLOW_MAX_TOKENS`` tokens.
    """
    import networkx as nx

    n_layers, _, n, _ = maps.shape
    if n > FLOW_MAX_TOKENS:
        raise ValueError(f"attention flow solves n² max-flow problems; {n} tokens is more than "
                         f"the {FLOW_MAX_TOKENS} it allows: use rollout, or a shorter text")
    g = nx.DiGraph()
    for layer in range(n_layers):
        a = _with_residual(maps[layer].mean(0), residual)
        for i in range(n):
            for j in range(n):
                if a[i, j] > 0:
                    g.add_edge((layer, j), (layer + 1, i), capacity=float(a[i, j]))
    out = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            out[i, j] = nx.maximum_flow_value(g, (0, j), (n_layers, i))
    return out / out.sum(-1, keepdim=True).clamp_min(1e-12)


def gradient_weighted(maps: list[torch.Tensor], grads: list[torch.Tensor]) -> torch.Tensor:
    """Gradient-weighted attention relevance (Chefer, Gur & Wolf 2021, "Generic
    attention-model explainability", rule for self-attention)::

        R = I;   for each layer:  Ā = mean_h (∇A ⊙ A)⁺;   R ← R + Ā R

    ``maps`` and ``grads`` are per layer ``(H, n, n)``: the attention maps and the gradient of the
    chosen scalar target with respect to them.
    """
    n = maps[0].shape[-1]
    r = torch.eye(n, dtype=torch.float64)
    for a, g in zip(maps, grads):
        a_bar = (g.double() * a.double()).clamp_min(0).mean(0)           # (n, n)
        r = r + a_bar @ r
    return r


def bert_gradient_attention(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            target=None) -> torch.Tensor:
    """Gradient-weighted relevance for attnlab's :class:`~attnlab.nn.BertModel` on one
    sequence. ``target(output, attention_mask) -> scalar`` defaults to the norm of the
    mean-pooled sentence embedding."""
    from attnlab.inspect.capture import record
    from attnlab.nn.bert import mean_pool

    if target is None:
        def target(out, mask):
            return mean_pool(out.last_hidden_state, mask).norm()

    with torch.enable_grad(), record(model) as rec:
        out = model(input_ids, attention_mask)
        value = target(out, attention_mask)
        grads = torch.autograd.grad(value, rec.raw)
    n = int(attention_mask[0].sum())
    return gradient_weighted([w[0, :, :n, :n].detach() for w in rec.raw],
                             [g[0, :, :n, :n] for g in grads])
