"""Checking an attention module against ``torch.nn.MultiheadAttention`` loaded with its
weights."""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch

from attnlab.testing.compare import EPS, _err
from attnlab.testing.report import CaseResult, CheckReport


def check_module(module: torch.nn.Module, reference: type = torch.nn.MultiheadAttention, *,
                 dtypes: Iterable[torch.dtype] = (torch.float64, torch.float32),
                 seed: int = 0) -> CheckReport:
    """Check an attention module against ``reference`` built with the same sizes and loaded
    with the same weights (``torch.nn.MultiheadAttention`` by default, whose parameter names
    and forward ``(query, key, value, key_padding_mask, need_weights, attn_mask,
    average_attn_weights, is_causal)`` the module must share).

    Cases: self- and cross-attention (N_k != N_q), a key padding mask (True = ignore, torch's
    polarity) with a fully padded sequence excluded, a bool ``attn_mask``, ``is_causal`` with its
    mask, per-head and averaged weights; outputs, weights and input gradients in each dtype
    within 2x (3x for gradients) of the reference's own error in that dtype against its
    float64 copy.
    """
    import copy

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    e, h = module.embed_dim, module.num_heads
    ref = reference(e, h, batch_first=getattr(module, "batch_first", False),
                    bias=module.in_proj_bias is not None)
    try:
        ref.load_state_dict(module.state_dict())
    except RuntimeError as exc:
        raise ValueError(f"{type(module).__name__}'s parameters do not load into "
                         f"{reference.__name__} ({str(exc).splitlines()[0]}); check_module "
                         "compares modules with the same parameter names") from None
    module, ref = module.eval(), ref.eval()
    bf = ref.batch_first
    report = CheckReport(f"{type(module).__name__} vs {reference.__name__}")
    start = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    b, n_q, n_k = 3, 7, 11

    def x(n):
        t = torch.randn(b, n, e, generator=g, dtype=torch.float64)
        return t if bf else t.transpose(0, 1)

    pad = torch.zeros(b, n_k, dtype=torch.bool)
    pad[1, 6:] = True
    mask = torch.rand(n_q, n_q, generator=g) > 0.7
    mask.fill_diagonal_(False)
    causal = torch.ones(n_q, n_q, dtype=torch.bool).triu(1)
    cases_ = [("self-attention", lambda: (x(n_q),), {}),
              ("cross-attention, N_k != N_q", lambda: (x(n_q), x(n_k)), {}),
              ("key padding mask", lambda: (x(n_q), x(n_k)), {"key_padding_mask": pad}),
              ("bool attn_mask", lambda: (x(n_q),), {"attn_mask": mask}),
              ("is_causal with its mask", lambda: (x(n_q),),
               {"attn_mask": causal, "is_causal": True}),
              ("per-head weights", lambda: (x(n_q),), {"average_attn_weights": False})]
    for name, make, kw in cases_:
        inputs = make()
        q = inputs[0]
        kv = inputs[1] if len(inputs) > 1 else q
        gold_m = copy.deepcopy(ref).double()
        for dtype in dtypes:
            def run(m, dt, q=q, kv=kv, kw=kw):
                qq = q.detach().to(dt).clone().requires_grad_()
                kk = qq if kv is q else kv.detach().to(dt).clone().requires_grad_()
                out, w = m.to(dt)(qq, kk, kk, need_weights=True, **kw)
                out.sum().backward()
                grads = [qq.grad] + ([] if kk is qq else [kk.grad])
                return [out.detach(), w.detach()] + grads
            try:
                gold = run(gold_m, torch.float64)
                plain = run(copy.deepcopy(ref), dtype)
                got = run(copy.deepcopy(module), dtype)
            except Exception as exc:
                report.results.append(CaseResult(name, str(dtype).removeprefix("torch."), False,
                                                 float("inf"),
                                                 f"raised {type(exc).__name__}: {exc}"))
                continue
            worst, detail = 0.0, ""
            for what, a, p, o, f in zip(("out", "weights", "d query", "d key"), gold, plain,
                                        got, (2, 2, 3, 3)):
                if o.shape != a.shape or not torch.isfinite(o).all():
                    worst, detail = float("inf"), f"{what}: shape {tuple(o.shape)} or NaN"
                    break
                bound = f * _err(p, a) + 4 * EPS[dtype] * e ** 0.5 * max(1.0, float(a.abs().max()))
                r = _err(o, a) / bound
                if r > worst:
                    worst, detail = r, f"{what} error {_err(o, a):.3g} > bound {bound:.3g}"
            report.results.append(CaseResult(name, str(dtype).removeprefix("torch."),
                                             worst <= 1, worst, detail))
    report.seconds = time.perf_counter() - start
    return report
