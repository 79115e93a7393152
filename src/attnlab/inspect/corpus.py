"""Sentences from text that ships with the installed packages, so nothing downloads.

The dataset descriptions of scikit-learn (``sklearn/datasets/descr/*.rst``) and the docstrings
of Python's standard library modules, cut into sentences of 5 to 40 words. The corpus of the
inspection study (``benchmarks/inspect_corpus.py``) and of the approximations' real-model
study (:mod:`attnlab.bench.model`).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

STDLIB = ["json", "csv", "argparse", "logging", "pathlib", "collections", "itertools",
          "functools", "random", "statistics", "datetime", "decimal", "fractions", "heapq",
          "bisect", "textwrap", "string", "unittest", "doctest", "pickle", "shutil", "tempfile",
          "subprocess", "threading", "queue", "socket", "email", "http", "urllib", "sqlite3",
          "zipfile", "tarfile", "gzip", "hashlib", "hmac", "secrets", "uuid", "typing",
          "dataclasses", "enum", "contextlib", "abc", "inspect", "ast", "dis", "tokenize", "re",
          "difflib", "pprint", "calendar", "locale", "gettext", "codecs", "unicodedata", "os",
          "sys", "io", "types", "operator", "copy", "weakref", "signal", "struct", "array",
          "platform", "pydoc", "pdb", "timeit", "trace", "pstats", "smtplib", "ftplib",
          "imaplib", "poplib", "mailbox", "mimetypes", "base64", "binascii", "quopri", "html",
          "webbrowser", "sched", "selectors", "asyncio", "concurrent.futures", "multiprocessing",
          "configparser", "netrc", "plistlib", "shelve", "dbm", "zlib", "bz2", "lzma", "fnmatch",
          "glob", "filecmp", "fileinput", "linecache", "tracemalloc", "warnings", "traceback",
          "atexit", "code", "codeop", "zipimport", "pkgutil", "modulefinder", "runpy", "symtable",
          "keyword", "pickletools", "xmlrpc.client", "ipaddress", "wave", "colorsys", "getpass",
          "curses", "shlex", "cmd", "optparse", "getopt", "nturl2path", "graphlib", "numbers",
          "cmath", "ssl", "mailcap", "turtle", "tkinter", "idlelib", "ensurepip", "venv",
          "zoneinfo"]


def sentences() -> list[str]:
    """Sentences from text bundled with installed packages (no download), deduplicated."""
    import sklearn

    texts = [p.read_text(encoding="utf-8") for p in
             sorted((Path(sklearn.__file__).parent / "datasets" / "descr").glob("*.rst"))]
    for name in STDLIB:
        try:
            doc = importlib.import_module(name).__doc__
        except Exception:                  # a module this Python build lacks (e.g. tkinter)
            continue
        if doc:
            texts.append(doc)
    out = []
    for text in texts:
        text = re.sub(r"[`*|_]{1,2}|:\w+:|\.\. \w+::.*", " ", text)        # reST markup
        text = re.sub(r"\s+", " ", text)
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text):
            words = s.split()
            letters = sum(c.isalpha() for c in s)
            if 5 <= len(words) <= 40 and s[-1] in ".!?" and letters > 0.7 * len(s.replace(" ", "")):
                out.append(s.strip())
    return out


def pairs(n: int) -> list[tuple[str, str]]:
    """Disjoint pairs of consecutive sentences (A, B), the first n."""
    sents = sentences()
    got = [(sents[i], sents[i + 1]) for i in range(0, len(sents) - 1, 2)]
    if len(got) < n:
        raise ValueError(f"only {len(got)} sentence pairs in the bundled text; ask for fewer")
    return got[:n]
