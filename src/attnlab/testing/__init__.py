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

Rows under a huge additive mask (-1e38, transformers' padding) are decided by the dtype's
arithmetic: ``S + m`` rounds to ``m``, and the formula gives them a uniform average. Their
gradients follow one rule (:data:`attnlab.testing.cases.ABSORBED_RULE`): the lse's gradient is
the weights the output used, ``d lse / d S = A``, each row summing to 1 as the identity
``lse(S + c) = lse(S) + c`` requires; the reference and every attnlab backend follow it, and so
does a variant that writes ``lse = m + log sum exp(S - m)`` with the row max ``m`` detached.
``torch.logsumexp``'s backward gives ``exp(S - lse)`` = 1 on every key of such a row (the lse
has rounded to ``m`` as well), so a variant built on it fails there, with the rule named.

Options passed to ``fn`` are attnlab's names: ``mask`` (bool, True = may attend, or float,
added), ``causal`` (bottom-right aligned), ``window=(left, right)``, ``scale``, ``dropout_p`` with
``generator``, ``enable_gqa``, ``softcap``, ``sinks``. Declare in ``supports`` the ones ``fn``
takes (:data:`~attnlab.testing.cases.FEATURES`); the others are not tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch

from attnlab.testing.cases import FEATURES, cases
from attnlab.testing.compare import DTYPES, _behaviour, _compare, _shrink
from attnlab.testing.module import check_module
from attnlab.testing.report import CaseResult, CheckReport, Unsupported

__all__ = ["CaseResult", "CheckReport", "FEATURES", "Unsupported", "check_attention",
           "check_backend", "check_module", "register_checked", "supports_of"]


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
                    gradcheck: bool = True, reference: Callable | None = None,
                    device: torch.device | str | None = None) -> CheckReport:
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
        device: where the cases run (default: the CPU); inputs are drawn on the CPU and
            moved, so every device sees the same numbers, and the float64 reference runs there.

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
                                     reference=reference, device=device)
            if ratio is None:
                report.results.append(CaseResult(case.name, str(dtype).removeprefix("torch."),
                                                 True, 0.0, detail, skipped=True))
                continue
            res = CaseResult(case.name, str(dtype).removeprefix("torch."), ratio <= 1,
                             ratio, detail)
            if not res.passed:
                res.smallest = _shrink(fn, case, dtype, want_lse, seed, case.shape, reference,
                                       device)
            report.results.append(res)
    report.results += _behaviour(fn, supports, gradcheck, device)
    report.seconds = time.perf_counter() - start
    return report


def register_checked(name: str, fn, capabilities, *, check=None, overwrite: bool = False,
                     **options):
    """Register a backend only if it passes :func:`check_backend`.

    The backend is registered under ``name`` (as :func:`attnlab.register_backend` with the same
    arguments), run through every conformance case its capabilities declare against the
    float64 reference, and kept only if it passes. Otherwise it is removed, whatever was
    registered under ``name`` before is put back, and a ``ValueError`` lists the failing cases.

    Example:
        >>> register_checked("mine", mine, Capabilities(lse=True))   # doctest: +SKIP
    """
    from attnlab.core.registry import (
        list_backends,
        register_backend,
        restore_backend,
        unregister_backend,
    )

    previous = list_backends().get(name)
    if previous is not None and not overwrite:
        raise ValueError(f"backend {name!r} is already registered; pass overwrite=True to "
                         "replace it")
    backend = register_backend(name, fn, capabilities, check=check, overwrite=True, **options)
    report = check_backend(name)
    if not report.passed:
        if previous is None:
            unregister_backend(name)
        else:
            restore_backend(previous)
        lines = "; ".join(f"{r.case} [{r.dtype}]: {r.detail}" for r in report.failures[:5])
        raise ValueError(f"backend {name!r} failed {len(report.failures)} of "
                         f"{len(report.results)} conformance cases and was not registered "
                         f"({lines}); run attnlab.testing.check_backend on it for the table")
    return backend
