"""The one progress bar of long jobs (training, ablation): rich, on stderr, shown only on a
terminal; a leaf every package may import."""

from __future__ import annotations


def progress_bar(verbose: bool, description: str):
    """A rich progress bar on stderr, shown only on a terminal and with ``verbose``: the one
    bar of long jobs (training, ablation)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[losses]}"), TimeElapsedColumn(),
                    console=console, transient=True,
                    disable=not (verbose and console.is_terminal))
