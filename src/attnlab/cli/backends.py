"""``attnlab backends``: every registered backend and what it can do."""

from __future__ import annotations

from rich.table import Table

from attnlab.cli.app import command, console


@command()
def backends():
    """List the attention backends and what each can do."""
    from rich.markup import escape

    from attnlab.core import list_backends

    table = Table(title="attention backends", title_justify="left")
    for col in ("name", "kind", "returns", "also takes"):
        table.add_column(col, no_wrap=col != "also takes")   # narrow consoles wrap the last
    for name, b in list_backends().items():
        c = b.capabilities
        returns = " ".join(["out"] + ["weights"] * c.weights + ["lse"] * c.lse)
        takes = " ".join(f for f, on in (("dropout", c.dropout), ("softcap", c.softcap),
                                         ("gqa", c.gqa), ("score_mod", c.score_mod)) if on)
        table.add_row(name, "exact" if c.exact else "approx", returns, takes or "-")
    console.print(table)
    for name, b in list_backends().items():
        c = b.capabilities
        dtypes = "" if len(c.dtypes) == 4 else "; dtypes: " + " ".join(sorted(
            str(t).replace("torch.", "") for t in c.dtypes))
        why = b.unavailable()
        note = "" if why is None else f"; [yellow]unavailable here[/yellow]: {escape(why)}"
        console.print(f"[bold]{escape(name)}[/bold]: {escape(b.description)}; masks: "
                      f"{', '.join(sorted(c.masks)) or 'none'}{dtypes}{note}")
    console.print("backend='auto' picks the fastest exact backend that can serve a request; "
                  "every backend with a backward pass differentiates all it takes.")
