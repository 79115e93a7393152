"""Running one case: the function, the float64 reference and the same-precision reference on
the same inputs, and the rule that compares them (error at most ``factor`` x the plain
reference's own error in that precision, plus a floor scaled by the logits); the behaviour
checks (determinism, gradcheck, dropout's generator)."""

from __future__ import annotations

import torch

from attnlab.testing.cases import SHRINK, Case
from attnlab.testing.report import CaseResult, Unsupported

EPS = {torch.float64: 2.2e-16, torch.float32: 1.2e-7, torch.bfloat16: 7.8e-3,
       torch.float16: 9.8e-4}
DTYPES = (torch.float64, torch.float32, torch.bfloat16)

def _call(fn, q, k, v, options):
    res = fn(q, k, v, **options)
    if isinstance(res, tuple):
        return res[0], res[1]
    out = getattr(res, "out", res)
    return out, getattr(res, "lse", None)


def _reference(q, k, v, options, want_lse):
    from attnlab.core.api import attention

    res = attention(q, k, v, backend="reference", return_lse=True, **options)
    return res.out, (res.lse if want_lse else None)


def _run(fn, q, k, v, options, grad, want_lse):
    """Output, lse and the gradients of <out, c> (+ <finite lse, c'>) for fixed cotangents."""
    q, k, v = (t.detach().requires_grad_(grad) for t in (q, k, v))
    out, lse = fn(q, k, v, options)
    grads = None
    if grad:
        g = torch.Generator().manual_seed(1)
        loss = (out * torch.randn(out.shape, generator=g, dtype=torch.float64).to(
            out.device, out.dtype)).sum()
        if want_lse and lse is not None:
            c = torch.randn(lse.shape, generator=g, dtype=torch.float64).to(lse.device,
                                                                             lse.dtype)
            loss = loss + (torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)) * c).sum()
        grads = torch.autograd.grad(loss, (q, k, v), allow_unused=True)
        grads = tuple(torch.zeros_like(t) if d is None else d for d, t in zip(grads, (q, k, v)))
    return out.detach(), None if lse is None else lse.detach(), grads


def _err(a, b) -> float:
    a, b = a.double(), b.double()
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    d = torch.where(same_inf, torch.zeros_like(a), (a - b).abs())
    d = torch.where(torch.isnan(d), torch.full_like(d, float("inf")), d)
    return float(d.max()) if d.numel() else 0.0


def _compare(fn, case: Case, shape, dtype, want_lse, seed, factor=2.0, grad_factor=3.0,
             reference=None, device=None):
    """(ratio, detail): worst error / allowed error over out, lse and grads; > 1 fails."""
    q, k, v, options = case.build(shape, torch.Generator().manual_seed(seed))
    if device is not None:                    # built on CPU (the same numbers), run there
        q, k, v = (t.to(device) for t in (q, k, v))
        options = {key: val.to(device) if isinstance(val, torch.Tensor) else val
                   for key, val in options.items()}
    cast = {key: (val.to(dtype) if isinstance(val, torch.Tensor) and val.is_floating_point()
                  else val) for key, val in options.items()}
    grad = case.grad
    ref = ((lambda *a: _reference(*a, want_lse)) if reference is None
           else (lambda *a: _call(reference, *a)))
    gold = _run(ref, q, k, v, options, grad, want_lse)
    low = [t.to(dtype) for t in (q, k, v)]
    plain = _run(ref, *low, cast, grad, want_lse)
    try:
        got = _run(lambda *a: _call(fn, *a), *low, cast, grad, want_lse)
    except Unsupported as exc:
        return None, f"skipped: {exc}"
    except Exception as exc:                                # the variant's own error
        return float("inf"), f"raised {type(exc).__name__}: {str(exc)[:120]}"
    if got[0].shape != gold[0].shape:
        return float("inf"), f"output shape {tuple(got[0].shape)}, expected {tuple(gold[0].shape)}"
    # A floor for where the plain reference happens to be exact: rounding of the order of
    # eps * sqrt(reduction length), amplified by the logits' size (an error eps * |s| in a
    # score moves the softmax by that much). Only float64 and float32 need it; in half
    # precision the same-precision reference's own error (the inputs' rounding) is the bound,
    # and a floor of that size would let an output 10% off pass.
    kk = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)          # GQA: K per q head
    logit = float((q @ kk.transpose(-1, -2)).abs().max()) * options.get("scale",
                                                                        q.shape[-1] ** -0.5)
    if dtype in (torch.float64, torch.float32):
        floor = 4 * EPS[dtype] * (shape[3] + shape[4]) ** 0.5 * max(1.0, logit)
    else:
        floor = EPS[dtype]                    # one unit in the last place of the output
    worst, detail = 0.0, ""
    pairs = [("out", gold[0], plain[0], got[0], factor)]
    if grad:
        pairs += [(n, a, b, c, grad_factor) for n, a, b, c in
                  zip(("dq", "dk", "dv"), gold[2], plain[2], got[2])]
    if want_lse:
        if got[1] is None:
            return float("inf"), "returned no lse (declared 'lse')"
        if not torch.equal(torch.isneginf(got[1]), torch.isneginf(gold[1])):
            return float("inf"), "lse is -inf on different rows than the reference"
        pairs.append(("lse", gold[1], plain[1], got[1], factor))
    for name, g, p, o, f in pairs:
        if not torch.isfinite(o).all() and name != "lse":
            return float("inf"), f"{name} has NaN or inf"
        finite = g[torch.isfinite(g)]
        scale = max(float(finite.abs().max()), 1.0) if finite.numel() else 1.0
        bound = f * _err(p, g) + floor * scale
        ratio = _err(o, g) / bound
        if name == "out" and ratio > 1:      # a wrong output is said before any gradient
            return ratio, f"out error {_err(o, g):.3g} > bound {bound:.3g}"
        if ratio > worst:
            worst, detail = ratio, f"{name} error {_err(o, g):.3g} > bound {bound:.3g}"
            if ratio > 1 and case.rule and want_lse and name in ("dq", "dk"):
                detail += f" ({case.rule})"
    return worst, detail


def _describe(shape, case) -> str:
    b, h, nq, nk, d = shape
    return f"B={b} H={h} N_q={nq} N_k={nk} D={d} ({case.name})"


def _shrink(fn, case, dtype, want_lse, seed, original, reference=None, device=None) -> str:
    size = lambda s: s[0] * s[1] * s[2] * s[3] * s[4]          # noqa: E731
    for shape in SHRINK:
        if size(shape) >= size(original):
            break
        ratio = _compare(fn, case, shape, dtype, want_lse, seed, reference=reference,
                         device=device)[0]
        if ratio is not None and ratio > 1:
            return _describe(shape, case)
    return _describe(original, case)


def _behaviour(fn, supports, gradcheck, device=None) -> list[CaseResult]:
    """Determinism, gradcheck and dropout's generator."""
    out = []
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 9, 12, generator=g).to(device) for _ in range(3))
    base: dict = {}
    try:
        _call(fn, q, k, v, base)
    except Unsupported:
        base = {"causal": True} if "causal" in supports else {"window": (2, 2)}
    except Exception:                         # reported by the checks below
        pass
    try:
        a, b = _call(fn, q, k, v, base)[0], _call(fn, q, k, v, base)[0]
        same = torch.equal(a, b)
        out.append(CaseResult("deterministic (two calls, same input)", "float32", same,
                              0.0 if same else float("inf"),
                              "" if same else f"outputs differ by {_err(a, b):.3g}"))
    except Exception as exc:
        out.append(CaseResult("deterministic", "float32", False, float("inf"),
                              f"raised {type(exc).__name__}: {exc}"))
    if gradcheck:
        qd, kd, vd = (torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64).to(
            device).requires_grad_() for _ in range(3))
        skipped = False
        try:
            ok = torch.autograd.gradcheck(lambda a, b, c: _call(fn, a, b, c, base)[0],
                                          (qd, kd, vd), raise_exception=False)
            detail = "" if ok else "analytical and numerical gradients differ"
        except Unsupported as exc:            # no float64 (a GPU kernel): the other cases
            ok, skipped = True, True          # still compare its gradients with the reference
            detail = f"skipped: {exc}"
        except Exception as exc:
            ok, detail = False, f"raised {type(exc).__name__}: {str(exc)[:120]}"
        out.append(CaseResult("gradcheck (float64, N=3, D=4)", "float64", ok,
                              0.0 if ok else float("inf"), detail, skipped=skipped))
    if "dropout" in supports:
        out += _dropout_statistics(fn, base, device)

        def drop(seed):
            gen = torch.Generator().manual_seed(seed)
            return _call(fn, q, k, v, {**base, "dropout_p": 0.5, "generator": gen})[0]

        try:
            a, b, c = drop(1), drop(1), drop(2)
            plain = _call(fn, q, k, v, base)[0]
            problems = []
            if not torch.equal(a, b):
                problems.append("the same generator seed gave different outputs (is the "
                                "generator ignored?)")
            if torch.equal(a, c):
                problems.append("different generator seeds gave the same output")
            if torch.allclose(a, plain):
                problems.append("dropout_p=0.5 changed nothing")
            ok = not problems
            detail = "; ".join(problems)
        except Exception as exc:
            ok, detail = False, f"raised {type(exc).__name__}: {str(exc)[:120]}"
        out.append(CaseResult("dropout follows its generator", "float32", ok,
                              0.0 if ok else float("inf"), detail))
    return out


DROP_P = 0.3               # not 0.5: keeping with probability p instead of 1 - p must show
Z_ALARM = 5.0              # |z| above this: two-sided false-alarm rate 5.7e-7 per statistic


def _dropout_statistics(fn, base, device) -> list[CaseResult]:
    """Dropout on the attention weights, checked from outside.

    * **Keep probability and rescale.** With V the identity (D_v = N_k) the output *is* the
      dropped weights, ``out[i, j] = w_ij m_ij / (1 - p)``: the share of weights set exactly to
      0 must be p (a binomial test, |z| <= 5) and every kept one must equal ``w_ij / (1 - p)``.
      Dropping before the softmax leaves no exact zero and rescales nothing; keeping with
      probability p drops 1 - p; forgetting the rescale keeps ratio 1.
    * **Unbiased.** Over 400 generator seeds the mean output on random V must equal the
      output without dropout: every element's mean within the Bonferroni bound of its
      standard error (false-alarm rate 1e-6 for the whole check, normal approximation).
    """
    import statistics

    results = []
    g = torch.Generator().manual_seed(11)
    b, h, nq, nk, d = 1, 2, 16, 24, 8
    q = torch.randn(b, h, nq, d, generator=g)
    k = torch.randn(b, h, nk, d, generator=g)
    eye = torch.eye(nk).expand(b, h, nk, nk).contiguous()
    to = (lambda t: t.to(device)) if device is not None else (lambda t: t)
    opts = {key: val for key, val in base.items() if key != "dropout_p"}
    name = f"dropout keeps 1 - p and rescales by 1/(1 - p) (p = {DROP_P})"
    try:
        ref = _call(fn, to(q), to(k), to(eye), opts)[0].double().cpu()      # the weights
        zeros = kept = 0
        ratios = []
        for seed in range(12):
            gen = torch.Generator().manual_seed(seed)
            got = _call(fn, to(q), to(k), to(eye), {**opts, "dropout_p": DROP_P,
                                                     "generator": gen})[0].double().cpu()
            live = ref > 1e-6
            dropped = live & (got == 0)
            zeros += int(dropped.sum())
            kept += int((live & ~dropped).sum())
            ratios.append((got[live & ~dropped] / ref[live & ~dropped]))
        n = zeros + kept
        share = zeros / max(n, 1)
        z = (share - DROP_P) / (DROP_P * (1 - DROP_P) / max(n, 1)) ** 0.5
        ratio = torch.cat(ratios) if ratios else torch.zeros(0)
        want = 1 / (1 - DROP_P)
        problems = []
        if zeros == 0:
            problems.append(f"no weight was dropped (0 of {n}): dropout must zero weights "
                            "after the softmax, not the scores before it")
        elif abs(z) > Z_ALARM:
            hint = (" (it keeps with probability p instead of 1 - p?)"
                    if abs(share - (1 - DROP_P)) < abs(share - DROP_P) else "")
            problems.append(f"{share:.1%} of the weights dropped with dropout_p={DROP_P} "
                            f"(z = {z:.1f}){hint}")
        if ratio.numel():
            off = float(((ratio - want).abs() / want).max())
            if off > 1e-4:
                median = float(ratio.median())
                hint = (" (not rescaled by 1/(1 - p))" if abs(median - 1) < 1e-3 else
                        " (the weights are not those of the softmax: dropout before it?)")
                problems.append(f"kept weights are {median:.4f} x the weight, expected "
                                f"1/(1 - p) = {want:.4f}{hint}")
        results.append(CaseResult(name, "float32", not problems,
                                  0.0 if not problems else float("inf"), "; ".join(problems)))
    except Exception as exc:
        results.append(CaseResult(name, "float32", False, float("inf"),
                                  f"raised {type(exc).__name__}: {str(exc)[:120]}"))
    name = "dropout is unbiased (mean of 400 seeds, false alarm 1e-6)"
    try:
        v = torch.randn(b, h, nk, d + 3, generator=g)
        plain = _call(fn, to(q), to(k), to(v), opts)[0].double().cpu()
        runs = torch.stack([
            _call(fn, to(q), to(k), to(v), {**opts, "dropout_p": DROP_P,
                                            "generator": torch.Generator().manual_seed(s)}
                  )[0].double().cpu() for s in range(1000, 1400)])
        mean, se = runs.mean(0), runs.std(0) / runs.shape[0] ** 0.5
        crit = statistics.NormalDist().inv_cdf(1 - 1e-6 / (2 * plain.numel()))
        z = ((mean - plain) / se.clamp_min(1e-12)).abs()
        worst = float(z.max())
        ok = worst <= crit
        bias = float(((mean - plain).abs().sum() / plain.abs().sum()))
        results.append(CaseResult(name, "float32", ok, worst / crit,
                                  "" if ok else f"the mean output is off by {bias:.1%} of the "
                                  f"output without dropout (max |z| = {worst:.1f} > {crit:.1f})"))
    except Exception as exc:
        results.append(CaseResult(name, "float32", False, float("inf"),
                                  f"raised {type(exc).__name__}: {str(exc)[:120]}"))
    return results
