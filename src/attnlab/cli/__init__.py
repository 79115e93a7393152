"""The ``attnlab`` command: the only package that knows flags, exit codes and results folders.

``app`` (in :mod:`attnlab.cli.app`) is the typer application; :mod:`~attnlab.cli.core` holds
``explain``, ``backends``, ``inspect`` and ``bench``, :mod:`~attnlab.cli.models` the
``fit`` / ``predict`` / ``demo`` commands over :mod:`~attnlab.cli.jobs`, and
:mod:`~attnlab.cli.readers` reads input files with errors that name their flags.
"""

from __future__ import annotations

import sys

import typer

from attnlab.cli import core as _core  # noqa: F401  (registers explain, backends, inspect, bench)
from attnlab.cli import models as _models  # noqa: F401  (registers fit, predict, demo)
from attnlab.cli import diagnose as _diagnose  # noqa: F401  (registers diagnose)
from attnlab.cli import paper as _paper  # noqa: F401  (registers paper)
from attnlab.cli.app import UsageError, app, app_help, console

__all__ = ["UsageError", "app", "console", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status. The torch thread count a
    command picks (:func:`~attnlab.cli.app.choose_threads`) is restored on return, so calling
    ``main`` in a process leaves that process as it was."""
    import torch

    before = torch.get_num_threads()
    try:
        return _main(argv)
    finally:
        torch.set_num_threads(before)


def _main(argv: list[str] | None) -> int:
    try:
        # Outside standalone mode typer returns (not raises) the code of an Exit, including the
        # 130 it makes of a KeyboardInterrupt: it is the exit status.
        code = app(args=argv, standalone_mode=False)
    except KeyboardInterrupt:
        code = 130
    except UsageError as exc:
        print(f"attnlab: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("attnlab: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:          # typer's usage errors (unknown option, bad value)
        if type(exc).__name__ == "NoArgsIsHelpError":
            ctx = getattr(exc, "ctx", None)          # `attnlab fit`: fit's help, not the top's
            print(ctx.get_help() + "\n" if ctx is not None else app_help(), end="")
            return 0
        print(f"attnlab: error: {exc.format_message()} (see attnlab --help)", file=sys.stderr)
        return 2
    if code == 130:
        print("attnlab: interrupted", file=sys.stderr)
    return code if isinstance(code, int) else 0
