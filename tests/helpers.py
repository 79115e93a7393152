"""Comparison against the float64 reference, relative to the same-precision reference."""

from __future__ import annotations

import shutil
from contextlib import contextmanager

import torch

from attnlab import attention, list_backends

EPS = {torch.float64: 2.2e-16, torch.float32: 1.2e-7, torch.bfloat16: 7.8e-3, torch.float16: 9.8e-4}


def run(q, k, v, backend, grad=True, want_lse=None, **kw):
    """Output, lse (if the backend declares it) and (dq, dk, dv) of ``<out, c> + <lse, c'>``
    for fixed random cotangents, so the gradient through lse is checked as well."""
    q, k, v = (t.detach().requires_grad_(grad) for t in (q, k, v))
    if want_lse is None:
        want_lse = list_backends()[backend].capabilities.lse
    res = attention(q, k, v, backend=backend, return_lse=want_lse, **kw)
    out = res.out if want_lse else res
    grads = None
    if grad:
        g = torch.Generator().manual_seed(1)
        cot = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.device, out.dtype)
        loss = (out * cot).sum()
        if want_lse:
            c_lse = torch.randn(res.lse.shape, generator=g, dtype=torch.float64).to(
                res.lse.device, out.dtype)
            finite = torch.where(torch.isfinite(res.lse), res.lse, torch.zeros_like(res.lse))
            loss = loss + (finite * c_lse).sum()
        grads = torch.autograd.grad(loss, (q, k, v))
    return out.detach(), (res.lse.detach() if want_lse else None), grads


def max_err(a, b):
    a, b = a.double(), b.double()
    both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    d = torch.where(both_inf, torch.zeros_like(a), (a - b).abs())
    return float(d.max()) if d.numel() else 0.0


def assert_backend_matches(q, k, v, backend, dtype, grad=True, factor=2.0, grad_factor=3.0, **kw):
    """backend in `dtype` vs the float64 reference, within `factor` x the error of the plain
    reference in `dtype` (plus a few ulps of floor for cases where that error is 0)."""
    lse = list_backends()[backend].capabilities.lse     # compared (with its gradient) if given
    gold = run(q.double(), k.double(), v.double(), "reference", grad=grad, want_lse=lse, **kw)
    plain = run(q.to(dtype), k.to(dtype), v.to(dtype), "reference", grad=grad, want_lse=lse,
                **kw)
    got = run(q.to(dtype), k.to(dtype), v.to(dtype), backend, grad=grad, want_lse=lse, **kw)
    # Where the plain reference happens to be exact (always in float64), allow rounding of the
    # order of eps * sqrt(reduction length), the typical error of a sum of that many terms.
    floor = 4 * EPS[dtype] * (k.shape[-2] + k.shape[-1]) ** 0.5
    for name, g, p, o in [("out", gold[0], plain[0], got[0])] + (
            [(n, a, b, c) for n, a, b, c in zip(("dq", "dk", "dv"), gold[2], plain[2], got[2])]
            if grad else []):
        f = factor if name == "out" else grad_factor
        scale = max(float(g.abs().max()), 1.0) if g.numel() else 1.0
        assert torch.isfinite(o).all(), f"{backend} {name} has NaN/inf"
        err, base = max_err(o, g), max_err(p, g)
        assert err <= f * base + floor * scale, (
            f"{backend} {dtype} {name}: err {err:.3g} > {f} x reference err {base:.3g} + floor")
    if got[1] is not None:
        err, base = max_err(got[1], gold[1]), max_err(plain[1], gold[1])
        assert err <= factor * base + floor * max(float(gold[1][torch.isfinite(gold[1])].abs().max()
                                                        if torch.isfinite(gold[1]).any() else 1), 1)
        assert torch.equal(torch.isneginf(got[1]), torch.isneginf(gold[1]))
    return gold, got


def loose_shift_inputs(scale: float, n: int = 90, d: int = 16, d_v: int = 5):
    """q, k, v (float64, ``(1, 2, n, ·)``) whose scores stay near 0 while the Cauchy-Schwarz
    softmax shift |q||k| grows with ``scale``: queries and keys live in orthogonal halves of
    the head dim (plus a small overlap). At ``scale`` 60 exp(score - shift) underflows, which
    sends the backends that use the bound to their exact-max fallback."""
    g = torch.Generator().manual_seed(0)
    h = d // 2
    q = torch.zeros(1, 2, n, d, dtype=torch.float64)
    k = torch.zeros(1, 2, n, d, dtype=torch.float64)
    q[..., :h] = torch.randn(1, 2, n, h, generator=g, dtype=torch.float64) * scale
    k[..., h:] = torch.randn(1, 2, n, h, generator=g, dtype=torch.float64) * scale
    k[..., :h] = torch.randn(1, 2, n, h, generator=g, dtype=torch.float64) * 0.1
    v = torch.randn(1, 2, n, d_v, generator=g, dtype=torch.float64)
    return q, k, v



CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class ReportPage:
    """A report opened in Debian's headless Chromium: ``page`` (playwright), and what the page
    did that a test checks: console ``errors``, ``requests`` and ``dialogs``."""

    def __init__(self, page):
        self.page, self.errors, self.requests, self.dialogs = page, [], [], []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def offline(self) -> bool:
        """No request left the machine."""
        return all(u.startswith(("file:", "data:")) for u in self.requests)


@contextmanager
def open_report(path, viewport=(1300, 1600), timeout_ms: int = 10_000):
    """``path`` in Chromium, waited on until the report has drawn itself (``body[data-ready]``,
    within ``timeout_ms``); yields a :class:`ReportPage`. The browser is closed on leaving."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM is not None, ("no chromium on this machine: `make test` installs it "
                                  "(bash scripts/system-deps.sh)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            report = ReportPage(page)
            page.goto(path.resolve().as_uri())
            page.wait_for_function(
                "() => { const r = [...document.querySelectorAll('.attnlab-report')];"
                " return r.length > 0 && r.every(x => x.dataset.ready === '1'); }",
                timeout=timeout_ms)
            yield report
        finally:
            browser.close()


def assert_close_by_name(names, got, want, tol):
    """Each pair of ``got`` / ``want`` (named by ``names``) agrees within ``tol`` of the larger
    of 1 and ``want``'s largest magnitude, with -inf in the same places and nothing else
    non-finite in ``got``."""
    for name, a, b in zip(names, got, want):
        assert torch.equal(torch.isneginf(a), torch.isneginf(b)), name
        a, b = torch.nan_to_num(a, neginf=0.0), torch.nan_to_num(b, neginf=0.0)
        assert torch.isfinite(a).all(), name
        scale = b.abs().max().clamp_min(1.0)
        assert (a - b).abs().max() <= tol * scale, (name, float((a - b).abs().max()))
