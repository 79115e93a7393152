"""The ``attnlab`` command: the only package that knows flags, exit codes and results folders.

One command per module (``explain``, ``backends``, ``inspect``, ``bench``, ``check``,
``diagnose``, ``fit``, ``predict``, ``demo``, ``paper``), each registered on the typer
application of :mod:`attnlab.cli.app` with :func:`~attnlab.cli.app.command`, the one place
where library errors become usage errors. :mod:`~attnlab.cli.jobs` holds what the applied
commands do and :mod:`~attnlab.cli.readers` reads input files with errors that name their flags.

Start-up is interruptible: :func:`main` installs its Ctrl-C handler before it imports typer,
torch or any command, so an interrupt at any moment ends with one line and exit status 130.
"""

from __future__ import annotations

import importlib
import signal
import sys

COMMANDS = ("explain", "backends", "inspect", "bench", "check", "diagnose", "fit", "predict",
            "demo", "paper")

# Commands that train (build a torch optimizer): see main().
TRAINING_COMMANDS = ("fit", "demo", "diagnose", "paper")

__all__ = ["COMMANDS", "main"]


def _interrupted_at_start(signum, frame):
    # Before the commands are loaded nothing is written yet: leave at once, one line, 130.
    # (Raising KeyboardInterrupt inside torch's or typer's import machinery gives tracebacks.)
    sys.stderr.write("attnlab: interrupted\n")
    sys.stderr.flush()
    import os

    os._exit(130)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status. The torch thread count a
    command picks (:func:`~attnlab.cli.app.choose_threads`) is restored on return, so calling
    ``main`` in a process leaves that process as it was."""
    in_main_thread = _set_sigint(_interrupted_at_start)
    try:
        import torch

        app_module = _load()
        words = sys.argv[1:] if argv is None else list(argv)
        if in_main_thread and words and words[0] in TRAINING_COMMANDS:
            # torch.optim imports torch._dynamo at the first optimizer, and with it Triton's
            # C++ extension where Triton is installed: a Ctrl-C inside that extension's
            # initialisation aborts the process with a C++ error instead of one line. Imported
            # here, an interrupt meets the start-up handler (one line, status 130).
            import torch._dynamo  # noqa: F401
    finally:
        # From here on Ctrl-C is a KeyboardInterrupt again: result folders clean up after it.
        if in_main_thread:
            _set_sigint(signal.default_int_handler)
    before = torch.get_num_threads()
    try:
        return _main(app_module, argv)
    finally:
        torch.set_num_threads(before)


def _set_sigint(handler) -> bool:
    """Install ``handler`` for SIGINT; False (and nothing done) outside the main thread."""
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:                            # signal only works in the main thread
        return False
    return True


def _load():
    """Import the application and register every command (one module each)."""
    for name in COMMANDS:
        importlib.import_module(f"attnlab.cli.{name}")
    return importlib.import_module("attnlab.cli.app")


def _main(app_module, argv: list[str] | None) -> int:
    import typer

    app, UsageError = app_module.app, app_module.UsageError
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
            print(ctx.get_help() + "\n" if ctx is not None else app_module.app_help(), end="")
            return 0
        print(f"attnlab: error: {' '.join(exc.format_message().split())} (see attnlab --help)",
              file=sys.stderr)
        return 2
    if code == 130:
        print("attnlab: interrupted", file=sys.stderr)
    return code if isinstance(code, int) else 0
