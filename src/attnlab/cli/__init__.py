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
from attnlab.cli.app import UsageError, app, app_help, console

__all__ = ["UsageError", "app", "console", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    try:
        app(args=argv, standalone_mode=False)
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
            print(app_help(), end="")
            return 0
        print(f"attnlab: error: {exc.format_message()} (see attnlab --help)", file=sys.stderr)
        return 2
    return 0
