"""The paper's words: one template per language (``templates/en.tex``, ``templates/zh.tex``),
cut into named pieces and filled from the paper's context.

A template is plain LaTeX. A line ``%% : name`` opens the piece ``name``, which runs to the next
such line; ``@word`` (or ``@{word}``) in a piece is filled by :func:`fill`, and ``@@`` is an
``@``. Other lines starting with ``%%`` before the first piece are the template's own notes.
A missing word raises ``KeyError`` naming it, so that no piece is ever printed half filled.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from importlib import resources

LANGS = ("en", "zh")

_PIECE = re.compile(r"^%% : (\S+)$", re.M)


class _TexTemplate(string.Template):
    delimiter = "@"
    idpattern = r"[A-Za-z][A-Za-z0-9_]*"


@lru_cache(maxsize=None)
def pieces(lang: str) -> dict[str, str]:
    """``{name: text}`` of the language's template."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    src = resources.files(__package__).joinpath("templates", f"{lang}.tex").read_text("utf-8")
    parts = _PIECE.split(src)
    return {name: body.removeprefix("\n").rstrip("\n")
            for name, body in zip(parts[1::2], parts[2::2])}


def fill(lang: str, name: str, **words) -> str:
    """The piece ``name`` of ``lang`` with its ``@words`` filled (numbers as ``str()``)."""
    try:
        text = pieces(lang)[name]
    except KeyError:
        raise KeyError(f"the {lang} template has no piece {name!r}") from None
    try:
        return _TexTemplate(text).substitute({k: str(v) for k, v in words.items()})
    except KeyError as err:
        raise KeyError(f"piece {name!r} of the {lang} template needs @{err.args[0]}") from None


def word(lang: str, kind: str, key: str) -> str:
    """A word of a vocabulary piece, e.g. ``word("en", "method", "base + attention")``; an
    unknown key is returned as it is."""
    name = f"{kind}.{re.sub(r'[^a-z0-9]+', '_', key.lower()).strip('_')}"
    if name not in pieces(lang):
        return key
    return fill(lang, name)
