"""Check an attention implementation the way attnlab checks its own backends.

    from attnlab.testing import check_attention

    report = check_attention(my_attention, supports={"causal", "mask", "lse"})
    print(report)              # a table: case, dtype, worst error, bound, pass / FAIL
    report.raise_for_failures()  # in pytest: fails with every failing case and its input

``fn(q, k, v, **options) -> out`` or ``(out, lse)``, tensors ``(B, H, N, D)``, is run on the
conformance cases of :mod:`attnlab.testing.cases` (awkward shapes, every mask kind and
broadcast pattern it declares, fully masked rows, large logits) in float64, float32 and
bfloat16, with the rule attnlab's own tests use: the error against the float64 reference
(:func:`attnlab.attention` with ``backend="reference"``) may be at most ``factor`` times the
error of the plain reference run in the same precision (2x for outputs, 3x for gradients), plus
a few ulps of floor. Gradients (dq, dk, dv), ``torch.autograd.gradcheck`` in float64,
determinism and, where declared, dropout's generator are checked too. For each failure the case
is rebuilt on smaller shapes and the smallest one that still fails is reported.

Options passed to ``fn`` are attnlab's names: ``mask`` (bool, True = may attend, or float,
added), ``causal`` (bottom-right aligned), ``window=(left, right)``, ``scale``, ``dropout_p`` with
``generator``, ``enable_gqa``, ``softcap``, ``sinks``. Declare in ``supports`` the ones ``fn``
takes (:data:`~attnlab.testing.cases.FEATURES`); the others are not tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from attnlab.testing.cases import FEATURES, SHRINK, Case, cases

__all__ = ["CaseResult", "CheckReport", "FEATURES", "Unsupported", "check_attention",
           "check_backend", "check_module", "supports_of"]

EPS = {torch.float64: 2.2e-16, torch.float32: 1.2e-7, torch.bfloat16: 7.8e-3,
       torch.float16: 9.8e-4}
DTYPES = (torch.float64, torch.float32, torch.bfloat16)


class Unsupported(Exception):
    """Raised by a checked function for an input it declares it does not take (the case is
    reported as skipped, not failed)."""


@dataclass
class CaseResult:
    case: str
    dtype: str
    passed: bool
    error: float = 0.0                    # worst error / bound (pass when <= 1)
    detail: str = ""
    smallest: str | None = None           # the smallest failing input, described
    skipped: bool = False


@dataclass
class CheckReport:
    """What :func:`check_attention` found. Prints as a table; falsy when a case failed."""

    name: str
    results: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        return not self.failures

    def __bool__(self) -> bool:
        return self.passed

    def table(self):
        from rich.table import Table

        skipped = sum(r.skipped for r in self.results)
        t = Table(title=f"{self.name}: {len(self.results) - len(self.failures) - skipped}/"
                        f"{len(self.results) - skipped} cases passed, {skipped} skipped, in "
                        f"{self.seconds:.1f} s",
                  title_justify="left")
        for col in ("case", "dtype", "error / bound", "result"):
            t.add_column(col, overflow="fold")
        for r in self.results:
            t.add_row(r.case, r.dtype, "-" if r.skipped else f"{r.error:.2f}",
                      r.detail if r.skipped else "pass" if r.passed else f"FAIL: {r.detail}"
                      + (f" (smallest: {r.smallest})" if r.smallest else ""))
        return t

    def __str__(self) -> str:
        import io

        from rich.console import Console

        console = Console(width=120, record=True, file=io.StringIO())
        console.print(self.table())
        return console.export_text()

    def raise_for_failures(self) -> None:
        if self.failures:
            lines = [f"{r.case} [{r.dtype}]: {r.detail}"
                     + (f"; smallest failing input: {r.smallest}" if r.smallest else "")
                     for r in self.failures]
            raise AssertionError(f"{self.name} failed {len(self.failures)} of "
                                 f"{len(self.results)} cases:\n  " + "\n  ".join(lines))


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
        loss = (out * torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
                ).sum()
        if want_lse and lse is not None:
            c = torch.randn(lse.shape, generator=g, dtype=torch.float64).to(lse.dtype)
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
             reference=None):
    """(ratio, detail): worst error / allowed error over out, lse and grads; > 1 fails."""
    q, k, v, options = case.build(shape, torch.Generator().manual_seed(seed))
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
    # Rounding of the order of eps * sqrt(reduction length) where the plain reference happens
    # to be exact (always in float64), amplified by the logits' size: an error eps * |s| in a
    # score moves the softmax by that much.
    kk = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)          # GQA: K per q head
    logit = float((q @ kk.transpose(-1, -2)).abs().max()) * options.get("scale",
                                                                        q.shape[-1] ** -0.5)
    floor = 4 * EPS[dtype] * (shape[3] + shape[4]) ** 0.5 * max(1.0, logit)
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
        if ratio > worst:
            worst, detail = ratio, f"{name} error {_err(o, g):.3g} > bound {bound:.3g}"
    return worst, detail


def _describe(shape, case) -> str:
    b, h, nq, nk, d = shape
    return f"B={b} H={h} N_q={nq} N_k={nk} D={d} ({case.name})"


def _shrink(fn, case, dtype, want_lse, seed, original, reference=None) -> str:
    size = lambda s: s[0] * s[1] * s[2] * s[3] * s[4]          # noqa: E731
    for shape in SHRINK:
        if size(shape) >= size(original):
            break
        ratio = _compare(fn, case, shape, dtype, want_lse, seed, reference=reference)[0]
        if ratio is not None and ratio > 1:
            return _describe(shape, case)
    return _describe(original, case)


def supports_of(backend: str) -> frozenset[str]:
    """The features a registered backend declares, in :func:`check_attention`'s names."""
    from attnlab.core.registry import get_backend

    caps = get_backend(backend).capabilities
    out = {"scale"}
    out |= {f for f, m in (("causal", "causal"), ("window", "window"), ("mask", "bool"),
                           ("float_mask", "float")) if m in caps.masks}
    out |= {f for f in ("lse", "dropout", "gqa", "softcap") if getattr(caps, f)}
    if caps.lse:
        out.add("sinks")                       # merged in from the lse (attnlab.attention)
    return frozenset(out)


def check_backend(backend: str, **kwargs) -> CheckReport:
    """:func:`check_attention` on a registered backend, called through
    :func:`attnlab.attention` with the features its capabilities declare."""
    from attnlab.core.api import attention

    supports = supports_of(backend)

    def fn(q, k, v, **options):
        try:
            res = attention(q, k, v, backend=backend, return_lse="lse" in supports, **options)
        except ValueError as exc:
            if "cannot serve this request" in str(exc):         # declared by its check
                raise Unsupported(str(exc).split(": ", 1)[-1].split(";")[0]) from None
            raise
        return (res.out, res.lse) if "lse" in supports else res

    dtypes = kwargs.pop("dtypes", None)
    if dtypes is None:
        from attnlab.core.registry import get_backend
        dtypes = [d for d in DTYPES if d in get_backend(backend).capabilities.dtypes]
    return check_attention(fn, supports=supports, name=backend, dtypes=dtypes, **kwargs)


def check_attention(fn: Callable, *, supports: Iterable[str] = (), name: str | None = None,
                    dtypes: Iterable[torch.dtype] = DTYPES, seed: int = 0,
                    gradcheck: bool = True, reference: Callable | None = None) -> CheckReport:
    """Run ``fn`` through the conformance cases; see the module docstring.

    Args:
        fn: ``fn(q, k, v, **options) -> out | (out, lse) | AttentionOutput``.
        supports: features from :data:`~attnlab.testing.cases.FEATURES` that fn takes.
        dtypes: precisions to check (default float64, float32, bfloat16).
        gradcheck: also run ``torch.autograd.gradcheck`` on a small float64 case.
        reference: for a variant whose math differs from softmax attention (sigmoid or
            differential attention...): its plain, readable version with the same signature,
            run in float64 as the spec and in each dtype as the precision baseline. Default:
            :func:`attnlab.attention` with ``backend="reference"``.

    Returns:
        A :class:`CheckReport`; ``report.raise_for_failures()`` raises in a test.
    """
    supports = frozenset(supports)
    unknown = supports - set(FEATURES) - {"deterministic"}
    if unknown:
        raise ValueError(f"supports has unknown feature(s) {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(FEATURES)}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    report = CheckReport(name or getattr(fn, "__name__", "attention"))
    start = time.perf_counter()
    want_lse = "lse" in supports
    for case in cases(supports):
        for dtype in dtypes:
            ratio, detail = _compare(fn, case, case.shape, dtype, want_lse, seed,
                                     reference=reference)
            if ratio is None:
                report.results.append(CaseResult(case.name, str(dtype).removeprefix("torch."),
                                                 True, 0.0, detail, skipped=True))
                continue
            res = CaseResult(case.name, str(dtype).removeprefix("torch."), ratio <= 1,
                             ratio, detail)
            if not res.passed:
                res.smallest = _shrink(fn, case, dtype, want_lse, seed, case.shape, reference)
            report.results.append(res)
    report.results += _behaviour(fn, supports, gradcheck)
    report.seconds = time.perf_counter() - start
    return report


def _behaviour(fn, supports, gradcheck) -> list[CaseResult]:
    """Determinism, gradcheck and dropout's generator."""
    out = []
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 9, 12, generator=g) for _ in range(3))
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
        qd, kd, vd = (torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64,
                                  requires_grad=True) for _ in range(3))
        try:
            ok = torch.autograd.gradcheck(lambda a, b, c: _call(fn, a, b, c, base)[0],
                                          (qd, kd, vd), raise_exception=False)
            detail = "" if ok else "analytical and numerical gradients differ"
        except Exception as exc:
            ok, detail = False, f"raised {type(exc).__name__}: {str(exc)[:120]}"
        out.append(CaseResult("gradcheck (float64, N=3, D=4)", "float64", ok,
                              0.0 if ok else float("inf"), detail))
    if "dropout" in supports:
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
            def run(m, dt):
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


def _install() -> None:
    from attnlab.core import registry

    registry._VERIFIER = check_backend


_install()
