"""The typer application every command registers on, its console, and the one usage error.

Usage errors print one line on stderr and exit with status 2, never a traceback. Commands
register with :func:`command`, which is the one place where the library's own errors
(``ValueError``, ``TypeError``, ``OSError``: they name arguments and the fix) become usage
errors.
"""

from __future__ import annotations

import contextlib
import functools
import io
from contextlib import redirect_stdout
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(
    help="attnlab: attention from the formula to fast, inspectable code.",
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console()


def _version(value: bool) -> None:
    if value:
        from attnlab import __version__

        print(f"attnlab {__version__}")
        raise typer.Exit(0)


# Commands whose models are small (tens of thousands of parameters, batches of a few hundred
# rows): torch's thread pool costs more in synchronisation than it gains, and on a machine
# with other work it spins against that work (a co2 fit took 227 s with the default pool next
# to another process, 18 s on a quiet machine and 7.5 s on one thread).
SMALL_WORK = ("fit", "predict", "demo")


def choose_threads(command: str | None, asked: int | None) -> int:
    """Threads for ``command``: ``--threads`` if given; 1 for the small applied models; else
    the CPUs this process may use less the load other processes put on them (at least 1)."""
    from attnlab._threads import spare_cpus

    if asked is not None:
        return asked
    if command in SMALL_WORK:
        return 1
    return spare_cpus()


@app.callback()
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          threads: Optional[int] = typer.Option(None, "--threads", min=1, max=256,
                                                help="torch threads (default: 1 for fit and "
                                                "predict, else the idle CPUs).")) -> None:
    """attnlab: attention from the formula to fast, inspectable code."""
    import torch

    torch.set_num_threads(choose_threads(ctx.invoked_subcommand, threads))


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


def one_of(value: str, option: str, allowed) -> str:
    """``value`` if it is one of ``allowed``, else a usage error naming ``option``, the
    choices and what came."""
    if value not in allowed:
        raise UsageError(f"{option} must be one of {', '.join(allowed)}, got {value!r}")
    return value


# What the library raises for bad input: the message names the argument and the fix.
LIBRARY_ERRORS = (ValueError, TypeError, OSError)


def command(name: str | None = None, *, on: typer.Typer | None = None, **options):
    """Register a command on ``app`` (or the sub-application ``on``), with the one mapping of
    library errors to usage errors: a :data:`LIBRARY_ERRORS` raised while it runs ends the
    command with its message on one line and exit status 2."""
    target = app if on is None else on

    def register(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except LIBRARY_ERRORS as exc:
                raise UsageError(" ".join(str(exc).split())) from None

        target.command(name, **options)(run)
        return fn

    return register


def say(text: str) -> None:
    """A dim progress line."""
    console.print(f"[dim]{text}[/dim]")


@contextlib.contextmanager
def working(text: str):
    """A long step: a spinner on a terminal; elsewhere (a pipe, a CI log) one line saying what
    runs, printed before it starts, so that the output never goes quiet without a word."""
    if console.is_terminal:
        with console.status(text):
            yield
    else:
        say(f"{text} ...")
        console.file.flush()
        yield


def parse_window(text: Optional[str]):
    """'W' -> W, 'L,R' -> (L, R); 'none' on a side means unbounded."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return None                                   # unbounded on both sides: no window
    parts = [p.strip().lower() for p in text.split(",")]
    try:
        vals = [None if p in ("none", "") else int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--window must be W or L,R with whole numbers (none = unbounded), "
                         f"got {text!r}; e.g. --window 2,0") from None
    if len(vals) == 1 and vals[0] is not None:
        return vals[0]
    if len(vals) == 2:
        return tuple(vals)
    raise UsageError(f"--window must be W or L,R, got {text!r}; e.g. --window 2,0")


def app_help() -> str:
    """The top-level --help text."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        try:
            app(args=["--help"], standalone_mode=False)
        except typer.Exit:
            pass
    return buf.getvalue()
