"""``attnlab check``: an attention function (or a registered backend) through the conformance
kit."""

from __future__ import annotations

import typer

from attnlab.cli.app import UsageError, command, console


@command()
def check(
    target: str = typer.Argument(..., help="package.module:function to check (or a backend "
                                 "name registered in attnlab)."),
    supports: str = typer.Option("", help="Comma-separated features the function takes: "
                                 "causal, window, mask, float_mask, dropout, lse, gqa, softcap, "
                                 "sinks, scale."),
    dtypes: str = typer.Option("float64,float32,bfloat16", help="Comma-separated precisions."),
):
    """Run an attention function through attnlab's conformance cases; exit 1 if one fails."""
    import importlib
    import os
    import sys

    import torch

    from attnlab.core.registry import list_backends
    from attnlab.testing import FEATURES, check_attention, check_backend

    wanted = [d.strip() for d in dtypes.split(",") if d.strip()]
    bad = [d for d in wanted if d not in ("float64", "float32", "bfloat16", "float16")]
    if bad or not wanted:
        raise UsageError(f"--dtypes takes float64, float32, bfloat16 or float16, got {dtypes!r}")
    chosen = [getattr(torch, d) for d in wanted]
    feats = {f.strip() for f in supports.split(",") if f.strip()}
    unknown = feats - set(FEATURES)
    if unknown:
        raise UsageError(f"--supports: unknown feature(s) {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(FEATURES)}")
    if ":" not in target:
        if target not in list_backends():
            raise UsageError(f"{target!r} is neither package.module:function nor a registered "
                             f"backend ({', '.join(list_backends())})")
        report = check_backend(target, dtypes=chosen)
    else:
        mod_name, _, fn_name = target.partition(":")
        # As `python -m` does, the current folder is importable (a user's mypkg/kernels.py).
        here = os.getcwd()
        added = here not in sys.path
        if added:
            sys.path.insert(0, here)
        try:
            fn = getattr(importlib.import_module(mod_name), fn_name)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot import {target}: {exc}; give package.module:function "
                             "importable from the current folder or the Python path") from None
        finally:
            if added:
                sys.path.remove(here)
        report = check_attention(fn, supports=feats, dtypes=chosen, name=target)
    console.print(report.table())
    if not report.passed:
        raise typer.Exit(1)
