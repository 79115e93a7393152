"""Attribution beyond raw attention: rollout, flow, gradient-weighted attention.

Maps are ``(L, H, n, n)`` for one sequence, rows = queries. Every result is ``(n, n)``:
entry ``[i, j]`` is how much input token j contributes to output position i.
"""

from __future__ import annotations

import torch

FLOW_MAX_TOKENS = 32        # the full flow matrix (n² max-flows) with scipy: 0.8 s at 32 tokens
FLOW_MAX_TOKENS_NUMBA = 64  # with numba: 1.4 s at 64 tokens, where scipy takes 8.6 s


def _with_residual(a: torch.Tensor, residual: float) -> torch.Tensor:
    """``(1 − r)·A + r·I`` with rows renormalized: the residual connection carries the token
    itself to the next layer (Abnar & Zuidema 2020, section 3)."""
    n = a.shape[-1]
    mixed = (1 - residual) * a + residual * torch.eye(n, dtype=a.dtype)
    return mixed / mixed.sum(-1, keepdim=True).clamp_min(1e-12)


def rollout(maps: torch.Tensor, residual: float = 0.5, start_layer: int = 0,
            per_layer: bool = False) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): ``R = Â_L ⋯ Â_s`` with
    ``Â_l = 0.5·mean_h A_l + 0.5·I`` (rows renormalized), from ``start_layer`` s on.

    With ``per_layer``, ``(L, n, n)``: the rollout up to each layer (identity before s)."""
    r = torch.eye(maps.shape[-1], dtype=maps.dtype)
    steps = []
    for i, layer in enumerate(maps):
        if i >= start_layer:
            r = _with_residual(layer.mean(0), residual) @ r
        steps.append(r)
    return torch.stack(steps) if per_layer else r


FLOW_SCALE = 2 ** 20     # capacities become integers in units of 2^-20 (exact integer max-flow)


def _flow_capacities(maps: torch.Tensor, residual: float) -> list:
    """Integer capacities of the layered flow graph, one ``(n, n)`` array per layer:
    ``[l][j, i]`` is edge (l, j) -> (l + 1, i), ``Â_l[i, j]`` in units of ``2^-20``."""
    return [torch.round(_with_residual(layer.double().mean(0), residual).T * FLOW_SCALE)
            .to(torch.int64).numpy() for layer in maps]


def _flow_graph(caps: list):
    """The whole layered graph as scipy's CSR: node ``l * n + j`` is token j before layer l."""
    import numpy as np
    from scipy.sparse import csr_matrix

    n = caps[0].shape[0]
    rows, cols, values = [], [], []
    for layer, cap in enumerate(caps):
        j, i = np.nonzero(cap)
        rows.append(layer * n + j)
        cols.append((layer + 1) * n + i)
        values.append(cap[j, i])
    size = (len(caps) + 1) * n
    return csr_matrix((np.concatenate(values).astype(np.int32),
                       (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))


NUMBA_FROM_WORK = 2 ** 21   # problems x n²: below, scipy is done before numba has loaded (1 s)


def max_flow_solver(n: int = 128, problems: int | None = None) -> str:
    """The max-flow solver for ``problems`` max-flows (default ``n``: the flow into one
    position) on ``n`` tokens: ``"numba"`` when numba is installed and the work, problems
    x n², is at least ``NUMBA_FROM_WORK`` (the flow into one position from 128 tokens, the
    full matrix from 33): every problem of one output position solved in threads on one
    residual graph (3 s at 512 tokens). Else ``"scipy"``: one ``maximum_flow`` call each,
    which rebuilds the graph every time (50 s at 512 tokens)."""
    from attnlab.inspect.metrics import numba_installed

    work = (n if problems is None else problems) * n * n
    return "numba" if work >= NUMBA_FROM_WORK and numba_installed() else "scipy"


def flow_matrix_limit(solver: str | None = None) -> int:
    """The most tokens :func:`flow` takes: ``FLOW_MAX_TOKENS_NUMBA`` with numba (given, or
    installed when ``solver`` is None), else ``FLOW_MAX_TOKENS``."""
    from attnlab.inspect.metrics import numba_installed

    numba = solver == "numba" or (solver is None and numba_installed())
    return FLOW_MAX_TOKENS_NUMBA if numba else FLOW_MAX_TOKENS


def _flows_into(caps: list, position: int, solver: str | None):
    """Integer max-flow from every input token into output ``position``, ``(n,)``."""
    import numpy as np

    solver = solver or max_flow_solver(caps[0].shape[0])
    if solver == "numba":
        from attnlab.inspect._fast import flows_into

        return flows_into(caps, position, threads=torch.get_num_threads())
    if solver != "scipy":
        raise ValueError(f"solver must be 'numba' or 'scipy', got {solver!r}")
    from scipy.sparse.csgraph import maximum_flow

    g, n = _flow_graph(caps), caps[0].shape[0]
    sink = len(caps) * n + position
    return np.array([maximum_flow(g, j, sink).flow_value for j in range(n)], dtype=np.int64)


def flow_from(maps: torch.Tensor, position: int, residual: float = 0.5,
              solver: str | None = None) -> torch.Tensor:
    """Attention flow into one output ``position`` from every input token, ``(n,)``,
    normalized to sum to 1: one max-flow problem per input token (n in all), so it runs at
    the full length a model takes (see :func:`flow` for the definition and the error of the
    integer capacities). ``solver``: ``"numba"`` or ``"scipy"`` (default: see
    :func:`max_flow_solver`); both give the same integers."""
    n = maps.shape[-1]
    if not 0 <= position < n:
        raise ValueError(f"position must be in 0..{n - 1} (one of the {n} tokens), got "
                         f"{position}")
    out = torch.from_numpy(_flows_into(_flow_capacities(maps, residual), position, solver))
    out = out.double() / FLOW_SCALE
    return out / out.sum().clamp_min(1e-12)


def flow(maps: torch.Tensor, residual: float = 0.5, solver: str | None = None) -> torch.Tensor:
    """Attention flow (Abnar & Zuidema 2020): the maximum flow from input token j to output
    position i through the layered graph whose edge capacities are ``Â_l``.

    Each row is then normalized to sum to 1, as rollout's rows do: a single source-sink
    flow is bounded by 1 and most pairs come close to it, so raw values hardly discriminate.
    One max-flow problem per pair (n² in all), solved exactly on capacities rounded to
    multiples of ``2^-20``: each edge is off by at most ``2^-21``, so a flow through c edges of
    a minimum cut by at most ``c · 2^-21`` (compared with networkx's exact float max-flow in
    the tests). Limited to :func:`flow_matrix_limit` tokens (64 with numba, 32 with scipy);
    for longer texts use :func:`flow_from` for the positions you need.
    """
    n = maps.shape[-1]
    solver = solver or max_flow_solver(n, n * n)
    limit = flow_matrix_limit(solver)
    if n > limit:
        raise ValueError(f"attention flow solves n² max-flow problems; {n} tokens is more than "
                         f"the {limit} it allows with {solver}: use flow_from(maps, position), "
                         "rollout, or a shorter text")
    caps = _flow_capacities(maps, residual)
    out = torch.stack([torch.from_numpy(_flows_into(caps, i, solver)) for i in range(n)])
    out = out.double() / FLOW_SCALE
    return out / out.sum(-1, keepdim=True).clamp_min(1e-12)


def gradient_weighted(maps: list[torch.Tensor], grads: list[torch.Tensor], start_layer: int = 0,
                      per_layer: bool = False) -> torch.Tensor:
    """Gradient-weighted attention relevance (Chefer, Gur & Wolf 2021, "Generic
    attention-model explainability", rule for self-attention)::

        R = I;   for each layer:  Ā = mean_h (∇A ⊙ A)⁺;   R ← R + Ā R

    ``maps`` and ``grads`` are per layer ``(H, n, n)``: the attention maps and the gradient of the
    chosen scalar target with respect to them.
    """
    n = maps[0].shape[-1]
    r = torch.eye(n, dtype=torch.float64)
    steps = []
    for i, (a, g) in enumerate(zip(maps, grads)):
        if i >= start_layer:
            a_bar = (g.double() * a.double()).clamp_min(0).mean(0)       # (n, n)
            r = r + a_bar @ r
        steps.append(r)
    return torch.stack(steps) if per_layer else r


TARGETS = ("norm", "similarity")


def bert_gradient_attention(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            target=None, token_type_ids: torch.Tensor | None = None,
                            start_layer: int = 0, per_layer: bool = False) -> torch.Tensor:
    """Gradient-weighted relevance for attnlab's :class:`~attnlab.nn.BertModel` on one
    sequence (a sentence pair needs its ``token_type_ids``: they change every map).

    ``target``: ``"norm"`` (default) of the mean-pooled sentence embedding; ``"similarity"``,
    for a pair, the cosine similarity of the two sentences' mean-pooled embeddings (which tokens
    make the two sentences similar); or a function ``target(output, attention_mask) -> scalar``.
    """
    from attnlab.inspect.capture import record
    from attnlab.nn.bert import mean_pool

    if target is None or target == "norm":
        def target(out, mask):
            return mean_pool(out.last_hidden_state, mask).norm()
    elif target == "similarity":
        if token_type_ids is None or not bool((token_type_ids == 1).any()):
            raise ValueError("target='similarity' needs a sentence pair (token_type_ids with "
                             "both segments); use target='norm' for one text")
        segs = token_type_ids

        def target(out, mask):
            h = out.last_hidden_state
            a = mean_pool(h, mask * (segs == 0))
            b = mean_pool(h, mask * (segs == 1))
            return torch.nn.functional.cosine_similarity(a, b).sum()
    elif not callable(target):
        raise ValueError(f"target must be one of {TARGETS} or a function, got {target!r}")

    with torch.enable_grad(), record(model) as rec:
        out = model(input_ids, attention_mask, token_type_ids)
        value = target(out, attention_mask)
        grads = torch.autograd.grad(value, rec.raw)
    n = int(attention_mask[0].sum())
    return gradient_weighted([w[0, :, :n, :n].detach() for w in rec.raw],
                             [g[0, :, :n, :n] for g in grads], start_layer, per_layer)
