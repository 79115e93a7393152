"""The one atomic write: a temporary name beside the target, then a rename, so a reader never
sees a half-written file or folder. Text, figures and model folders all go through
:func:`atomic_path`.

Files and folders get the permissions the user's umask gives a new file (``mkstemp`` alone
creates them 0600, which breaks a shared results folder or a served report).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)      # elsewhere: the only portable read, restored at once
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path, *, folder: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``.

    The temporary file keeps ``path``'s suffix (writers that pick a format from the name, such
    as matplotlib, see the right one). With ``folder=True`` a temporary folder is yielded and
    swapped in whole, replacing an existing folder only once the new one is complete. On an
    exception nothing at ``path`` changes and the temporary is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        if path.exists() and not path.is_dir():
            raise ValueError(f"path {str(path)!r} is a file; a folder is written there "
                             "(give a new name or a folder)")
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
        mode = 0o777
    else:
        if path.is_dir():
            raise ValueError(f"path {str(path)!r} is a folder; a file is written there "
                             "(give a file name)")
        fd, name = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix,
                                    dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        mode = 0o666
    try:
        yield tmp
        os.chmod(tmp, mode & ~_umask())
        if folder and path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}-old-", dir=path.parent))
            os.rmdir(old)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; creates the parent folder."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; creates the parent folder."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
